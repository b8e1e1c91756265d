"""Device-to-host reads of a training step. On an accelerator each read of a tensor's value from Python (`item`,
`tolist`, `bool(t)`, `int(t)`, ...) waits for the device. The window layout reads once per forward (the grid's
size is data-dependent), all its values in one transfer; a training step must add none: the input and label checks
skip their reads on an accelerator with gradients on (`input_checks.reads_values`), and no layer reads the layout's
values again. Counted here on CPU with the accelerator rule of `reads_values` switched on."""

import pytest
import torch

import ran_hf.input_checks as input_checks
from benchmarks.decode_ops import count_host_reads
from conftest import randomize, tiny_config
from ran_hf import (
    RANForCausalLM,
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
)
from ran_hf.window_layout import RANWindowLayout


@pytest.fixture
def host_reads():
    """A counter of the Python-level reads of tensor values while it is installed (`benchmarks.decode_ops`)."""
    with count_host_reads() as counter:
        yield counter


def batch():
    ids = torch.randint(1, 97, (2, 29), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0  # a padded row: the layout takes its general path
    return ids, mask


def layout_reads(host_reads, mask, causal: bool) -> int:
    """What one forward's layout reads: building it, then the values its layers ask for (each read once)."""
    host_reads.clear()
    layout = RANWindowLayout.from_mask(mask.bool(), 8, 0 if causal else 3, causal=causal)
    layout.key_mask(), layout.last_window_unfinished, layout.num_past
    return sum(host_reads.values())


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["all-real", "padded"])
def test_the_layout_reads_the_device_once(host_reads, causal, padded):
    ids, mask = batch()
    assert layout_reads(host_reads, mask if padded else torch.ones_like(mask), causal) == 1


def test_a_continued_window_is_laid_out_in_one_read_and_a_static_layout_in_none(host_reads):
    mask = torch.ones(2, 3, dtype=torch.bool)
    RANWindowLayout.from_mask(mask, 8, causal=True, offset=torch.tensor([5, 0]))
    assert sum(host_reads.values()) == 1
    host_reads.clear()
    RANWindowLayout.from_mask(mask, 8, 3, static=True)
    assert sum(host_reads.values()) == 0


def test_reads_values_is_off_on_an_accelerator_with_gradients_on():
    on_accelerator = torch.empty(2, device="meta")
    assert not input_checks.reads_values(on_accelerator)
    with torch.no_grad():
        assert input_checks.reads_values(on_accelerator)  # inference (pipelines, evaluation) is checked
    assert input_checks.reads_values(torch.empty(2))


@pytest.mark.parametrize("cls", [RANForSequenceClassification, RANForMaskedLM, RANForTokenClassification,
                                 RANForQuestionAnswering], ids=lambda c: c.__name__)
def test_a_bidirectional_training_step_reads_only_what_the_layout_needs(cls, host_reads, monkeypatch):
    monkeypatch.setattr(input_checks, "reads_values", lambda tensor: False)  # the rule on an accelerator
    ids, mask = batch()
    model = randomize(cls(tiny_config(num_labels=3, num_hidden_layers=3))).train()
    if cls is RANForQuestionAnswering:
        labels = dict(start_positions=torch.tensor([3, 4]), end_positions=torch.tensor([5, 9]))
    elif cls is RANForSequenceClassification:
        labels = dict(labels=torch.tensor([0, 2]))
    else:
        labels = dict(labels=(ids % 3).masked_fill(mask == 0, -100))
    expected = layout_reads(host_reads, mask, causal=False)
    host_reads.clear()
    model(ids, attention_mask=mask, **labels).loss.backward()
    assert sum(host_reads.values()) == expected, dict(host_reads)


def test_a_causal_training_step_reads_the_layout_and_the_history_length_once(host_reads, monkeypatch):
    monkeypatch.setattr(input_checks, "reads_values", lambda tensor: False)
    ids, mask = batch()
    model = randomize(RANForCausalLM(tiny_config(num_hidden_layers=3))).train()
    expected = layout_reads(host_reads, mask, causal=True) + 1  # the layers' states size their review history alike
    host_reads.clear()
    model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss.backward()
    assert sum(host_reads.values()) == expected, dict(host_reads)


def decoding_step_reads(host_reads, num_hidden_layers: int, prompt_length: int) -> int:
    """Host reads of one decoding step after `prompt_length` tokens (window 8)."""
    model = randomize(RANForCausalLM(tiny_config(num_hidden_layers=num_hidden_layers))).eval()
    ids = torch.randint(1, 97, (1, prompt_length + 1), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model(ids[:, :prompt_length], use_cache=True).cache
        host_reads.clear()
        model(ids[:, prompt_length:], cache=cache, use_cache=True)
    return sum(host_reads.values())


def test_a_decoding_step_reads_the_history_length_only_when_it_finishes_a_window(host_reads):
    # token 11 of 8-token windows finishes none: the input checks and the layout read, no layer commits
    assert decoding_step_reads(host_reads, 3, 10) == decoding_step_reads(host_reads, 1, 10) == 2
    # token 16 finishes the second window: the layers size their new review history, all with one read
    assert decoding_step_reads(host_reads, 3, 15) == decoding_step_reads(host_reads, 1, 15) == 3
