"""LoRA fine-tuning with PEFT: runs the README's example verbatim on a tiny model.

A classifier started from a masked-LM checkpoint has a new pooler (cell transform) and classifier. The example names
both in `modules_to_save`; the test checks that they and the LoRA matrices train while every weight loaded from the
checkpoint stays put, and that the saved adapter reloads to the same logits.
"""


import pytest
import torch

from ran_hf import RANForMaskedLM
from conftest import randomize, readme_block, tiny_config


peft = pytest.importorskip("peft")
pytestmark = pytest.mark.usefixtures("one_thread")



def labelled_documents(count=16, length=24, seed=0):
    """Documents whose label is whether token 5 occurs in them: learnable, deterministic."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for i in range(count):
        ids = torch.randint(6, 97, (length,), generator=generator)
        if i % 2:
            ids[torch.randint(0, length, (3,), generator=generator)] = 5
        examples.append({"input_ids": ids, "attention_mask": torch.ones(length, dtype=torch.long),
                         "labels": torch.tensor(i % 2)})
    return examples


def test_readme_lora_example_trains_adapters_pooler_and_classifier_only(tmp_path, monkeypatch):
    mlm_checkpoint = str(tmp_path / "mlm")
    torch.manual_seed(0)
    randomize(RANForMaskedLM(tiny_config()), seed=0).save_pretrained(mlm_checkpoint)
    loaded = RANForMaskedLM.from_pretrained(mlm_checkpoint).state_dict()

    monkeypatch.chdir(tmp_path)
    namespace = {"mlm_checkpoint": mlm_checkpoint, "train_dataset": labelled_documents()}
    exec(compile(readme_block("lora-example"), "README.md:lora-example", "exec"), namespace)
    model, reloaded = namespace["model"], namespace["reloaded"]

    trained = dict(model.named_parameters())
    # LoRA B starts at zero; each one moves, except on the cell initializer, whose input is the zero vector unless
    # an `initial_cell` is passed
    lora_b = [name for name in trained if "lora_B" in name and "cell_initializer" not in name]
    still = [name for name in lora_b if not trained[name].detach().abs().max() > 0]
    assert len(lora_b) > 10 and not still, f"LoRA B matrices that never moved: {still}"
    # pooler and classifier: trainable copies that moved away from the frozen originals PEFT keeps beside them
    for module in ("ran.pooler", "classifier"):
        copies = {n: p for n, p in trained.items() if f"{module}.modules_to_save.default." in n}
        assert copies and all(p.requires_grad for p in copies.values()), f"{module} is not trained in full"
        moved = [n for n, p in copies.items()
                 if not torch.equal(p, trained[n.replace("modules_to_save.default", "original_module")])]
        assert len(moved) == len(copies), f"{module}: {sorted(set(copies) - set(moved))} did not move"
    # every weight that came from the checkpoint is exactly as loaded
    base = {name.replace("base_model.model.", "").replace(".base_layer", ""): p for name, p in trained.items()
            if "lora_" not in name and "modules_to_save" not in name and "original_module" not in name}
    shared = [name for name in base if name in loaded]
    assert len(shared) > 20
    for name in shared:
        assert not base[name].requires_grad, f"{name} is trainable"
        assert torch.equal(base[name].cpu(), loaded[name]), f"{name} changed"

    device = next(model.parameters()).device  # (Trainer moved it to a GPU when there is one)
    ids = torch.stack([example["input_ids"] for example in labelled_documents(4, seed=1)]).to(device)
    reloaded.to(device)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits)
