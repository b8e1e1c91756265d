"""RANConfig and the modes it selects.

* A causal checkpoint (what `run_clm.py` writes) loads into every head and Auto class; only the causal LM keeps the
  causal encoder, every other class sees the whole document. No constructor changes the caller's config.
* Choice fields are `Literal` types validated with their allowed values; the replaced pooling fields map to
  `pooler_mode` with the same outputs; integer literals for float fields are accepted; a config edited into an
  invalid value is caught where it is made, before torch.
"""

import copy
import logging

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from ran_hf import (
    RANConfig,
    RANForCausalLM,
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
    RANModel,
)
from conftest import randomize, tiny_config


pytestmark = pytest.mark.usefixtures("one_thread")

BIDIRECTIONAL_AUTO = [AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification,
                      AutoModelForTokenClassification, AutoModelForQuestionAnswering]
HEADS = [RANModel, RANForMaskedLM, RANForSequenceClassification, RANForTokenClassification, RANForQuestionAnswering]


def first_position_output(model, ids):
    """The output at position 0 (first token), whatever the head: hidden state, logits, or span logits."""
    out = model(ids)
    if isinstance(model, RANForSequenceClassification):
        return out.logits[0]  # a pooled document vector: any token changes it in bidirectional mode
    if isinstance(model, RANForQuestionAnswering):
        return out.start_logits[0, 0]
    if isinstance(model, RANModel):
        return out.last_hidden_state[0, 0]
    return out.logits[0, 0]


def ids_and_late_change(length=20, seed=0):
    ids = torch.randint(1, 97, (1, length), generator=torch.Generator().manual_seed(seed))
    late = ids.clone()
    late[0, -1] = ids[0, -1] % 96 + 1  # a different real token at the last position (a later window)
    return ids, late


# ---------------------------------------------------------------------------------------------------------------------
# the causal LM does not change its config; causal checkpoints load bidirectional elsewhere
# ---------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def causal_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("clm")
    config = tiny_config(num_labels=3)
    model = randomize(RANForCausalLM(config), seed=1)
    assert config.is_decoder is False, "RANForCausalLM changed the caller's config"
    model.save_pretrained(path)
    return path


def test_causal_lm_is_causal_by_its_class_and_leaves_the_config_alone():
    config = tiny_config()
    before = config.to_dict()
    model = RANForCausalLM(config)
    assert model.is_causal and model.ran.is_causal
    assert config.to_dict() == before and not config.is_decoder
    # a classifier built from the same config object afterwards is the ordinary bidirectional one
    classifier = RANForSequenceClassification(config).eval()
    ids, late = ids_and_late_change()
    with torch.no_grad():
        assert not torch.equal(classifier(ids).logits, classifier(late).logits)


@pytest.mark.parametrize("auto_class", BIDIRECTIONAL_AUTO, ids=lambda c: c.__name__)
def test_causal_checkpoint_loads_bidirectional_in_every_other_class(causal_checkpoint, auto_class, caplog):
    ids, late = ids_and_late_change()
    with caplog.at_level(logging.WARNING, logger="ran_hf"):
        model = auto_class.from_pretrained(causal_checkpoint).eval()
    assert not model.is_causal and not (model if isinstance(model, RANModel) else model.ran).is_causal
    assert any("bidirectional encoder" in record.getMessage() for record in caplog.records), "no notice logged"
    with torch.no_grad():
        early, early_after_change = first_position_output(model, ids), first_position_output(model, late)
    assert float((early - early_after_change).abs().max()) > 1e-6, "the first token does not see the last one"
    # the weights are the causal LM's: the shared encoder gives the same tokens at position 0 in causal mode
    causal = RANForCausalLM.from_pretrained(causal_checkpoint).eval()
    assert causal.is_causal and causal.ran.is_causal
    assert torch.equal(model.state_dict()["ran.embeddings.word_embeddings.weight" if not isinstance(model, RANModel)
                                          else "embeddings.word_embeddings.weight"],
                       causal.state_dict()["ran.embeddings.word_embeddings.weight"])


def test_causal_checkpoint_round_trip_keeps_causal_lm_causal(causal_checkpoint):
    model = AutoModelForCausalLM.from_pretrained(causal_checkpoint).eval()
    assert isinstance(model, RANForCausalLM) and model.ran.is_causal
    ids, late = ids_and_late_change()
    with torch.no_grad():
        assert torch.equal(model(ids).logits[0, :-1], model(late).logits[0, :-1])


@pytest.mark.parametrize("cls", HEADS[1:], ids=lambda c: c.__name__)
def test_heads_built_from_a_causal_config_are_bidirectional_and_leave_it_alone(cls):
    config = tiny_config(is_decoder=True)
    snapshot = copy.deepcopy(config.to_dict())
    model = cls(config).eval()
    assert config.to_dict() == snapshot, f"{cls.__name__} changed the caller's config"
    assert not model.is_causal and not model.ran.is_causal
    ids, late = ids_and_late_change()
    with torch.no_grad():
        assert not torch.equal(first_position_output(model, ids), first_position_output(model, late))


def test_passing_a_config_object_to_from_pretrained_leaves_it_alone(causal_checkpoint):
    config = RANConfig.from_pretrained(causal_checkpoint)
    assert config.is_decoder
    model = AutoModel.from_pretrained(causal_checkpoint, config=config)
    assert config.is_decoder and not model.is_causal


def test_the_bare_encoder_can_still_be_causal_on_request(causal_checkpoint):
    assert RANModel(tiny_config(is_decoder=True)).is_causal  # built directly: RANForCausalLM's body
    model = RANModel.from_pretrained(causal_checkpoint, is_decoder=True).eval()
    assert model.is_causal and model.config.is_decoder
    ids, late = ids_and_late_change()
    with torch.no_grad():
        assert torch.equal(model(ids).last_hidden_state[0, :-1], model(late).last_hidden_state[0, :-1])


# ---------------------------------------------------------------------------------------------------------------------
# Choice fields are Literal types; integer literals for float fields; edits are checked where they are made
# ---------------------------------------------------------------------------------------------------------------------


def test_choice_fields_are_literals_validated_with_the_allowed_values():
    from typing import Literal, get_args, get_origin

    annotations = RANConfig.__annotations__
    for name in ("cell_pooling", "pooler_mode", "chain_implementation"):
        assert get_origin(annotations[name]) is Literal, name
        allowed = get_args(annotations[name])
        for value in allowed:
            assert getattr(tiny_config(**{name: value}), name) == value
        with pytest.raises(ValueError, match=rf"`{name}` must be one of \({allowed[0]!r}.*got 'nope'"):
            tiny_config(**{name: "nope"})
        config = tiny_config()
        with pytest.raises(ValueError, match=rf"`{name}` must be one of"):
            setattr(config, name, "nope")  # also after construction


@pytest.mark.parametrize(
    "old_fields, pooler_mode",
    [(dict(pooler_type="cell"), "cell_max"), (dict(pooler_pooling="mean"), "cell_mean"),
     (dict(pooler_type="cell", pooler_pooling="max"), "cell_max"),
     (dict(pooler_type="cell", pooler_pooling="mean"), "cell_mean"),
     (dict(pooler_type="average"), "token_mean"), (dict(pooler_type="average", pooler_pooling="max"), "token_mean"),
     (dict(pooler_type="average", pooler_pooling="mean"), "token_mean")],
)
def test_the_replaced_pooling_fields_map_to_pooler_mode_with_the_same_outputs(old_fields, pooler_mode):
    old, new = tiny_config(**old_fields), tiny_config(pooler_mode=pooler_mode)
    assert old.pooler_mode == pooler_mode and old.to_dict() == new.to_dict()
    assert tiny_config(pooler_mode=pooler_mode, **old_fields).pooler_mode == pooler_mode  # agreeing: fine
    torch.manual_seed(0)
    first = RANModel(old).eval()
    second = RANModel(new).eval()
    second.load_state_dict(first.state_dict())
    ids = torch.randint(1, 97, (2, 19), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(first(ids).pooler_output, second(ids).pooler_output)


def test_the_replaced_pooling_fields_are_checked_and_cannot_be_read_or_assigned():
    for name, allowed in (("pooler_type", ("cell", "average")), ("pooler_pooling", ("max", "mean"))):
        with pytest.raises(ValueError, match=rf"`{name}` must be one of \({allowed[0]!r}.*got 'nope'.*pooler_mode"):
            tiny_config(**{name: "nope"})
        config = tiny_config()
        for access in (lambda: getattr(config, name), lambda: setattr(config, name, allowed[0])):
            with pytest.raises(AttributeError, match=rf"`{name}` was replaced by `pooler_mode`"):
                access()
    with pytest.raises(ValueError, match=r"`pooler_mode='cell_mean'` contradicts .* pass `pooler_mode` alone"):
        tiny_config(pooler_mode="cell_mean", pooler_type="average")


def test_integer_literals_for_float_fields_are_accepted_as_floats(tmp_path):
    config = tiny_config(layer_norm_eps=1, rope_theta=10000, hidden_dropout_prob=0, attention_probs_dropout_prob=0,
                         initializer_range=1)
    for name in ("layer_norm_eps", "rope_theta", "hidden_dropout_prob", "attention_probs_dropout_prob",
                 "initializer_range"):
        assert type(getattr(config, name)) is float, name
    config.layer_norm_eps = 2
    assert config.layer_norm_eps == 2.0 and type(config.layer_norm_eps) is float
    config.save_pretrained(tmp_path)
    assert RANConfig.from_pretrained(tmp_path).layer_norm_eps == 2.0
    RANModel(config)(torch.ones(1, 5, dtype=torch.long))


@pytest.mark.parametrize(
    "name, value, match, where",
    [("window_size", 0, "`window_size` must be a positive integer", "assignment"),
     ("min_window_size", 50, r"`min_window_size` must be an integer in \[0, window_size=8\]", "forward"),
     ("hidden_dropout_prob", 1.5, r"`hidden_dropout_prob` must be in \[0, 1\)", "assignment"),
     ("layer_norm_eps", -1.0, "`layer_norm_eps` must be positive", "assignment"),
     ("hidden_act", "nope", "`hidden_act` must be one of", "assignment"),
     ("pad_token_id", 200, "`pad_token_id` must be None or in", "forward")],
)
@pytest.mark.parametrize("cls", [RANModel, RANForCausalLM], ids=lambda c: c.__name__)
def test_config_edited_into_an_invalid_value_is_caught_before_torch(cls, name, value, match, where):
    """A field's own range is checked where it is assigned (the old value stays); the two relations a forward reads
    (`check_forward_relations`) are checked at the forward, since `from_pretrained` assigns keywords one by one."""
    model = cls(tiny_config()).eval()
    old = getattr(model.config, name)
    with pytest.raises(ValueError, match=match):
        setattr(model.config, name, value)
        assert where == "forward", f"{name}={value!r} was accepted at assignment"
        model(torch.ones(1, 5, dtype=torch.long))
    if where == "assignment":
        assert getattr(model.config, name) == old


def test_the_config_is_not_validated_again_at_every_forward(monkeypatch):
    model = RANModel(tiny_config()).eval()
    calls = []
    monkeypatch.setattr(RANConfig, "validate_architecture", lambda self: calls.append(1))
    with torch.no_grad():
        model(torch.ones(1, 5, dtype=torch.long))
    assert not calls


def test_related_fields_can_be_changed_one_by_one():
    config = tiny_config()  # window 8, min window 3
    config.min_window_size = 6
    config.window_size = 4  # min_window_size > window_size until the next line: allowed in between
    config.min_window_size = 2
    config.validate_architecture()
    assert RANModel(config)(torch.ones(1, 9, dtype=torch.long)).last_hidden_state.shape == (1, 9, 32)


def test_a_field_fixed_at_build_time_raises_on_assignment_after_building():
    """`pooler_mode` or `use_memory_review` edited on a built model's config would be ignored (or crash later):
    the assignment raises, naming the way to get such a model; the config keeps its value, the model still runs."""
    from ran_hf import RANForSequenceClassification

    config = tiny_config(num_labels=2)
    config.pooler_mode = "token_mean"  # before any model: allowed
    model = RANForSequenceClassification(config).eval()
    for name, value in (("pooler_mode", "cell_mean"), ("use_memory_review", False), ("hidden_dropout_prob", 0.3)):
        with pytest.raises(ValueError, match=rf"`{name}` is fixed once a model is built.*from_pretrained\(path, {name}="):
            model.config.__setattr__(name, value)
    assert model.config.pooler_mode == "token_mean" and model.config.use_memory_review
    model.config.pooler_mode = "token_mean"  # the same value: no change, no error
    ids = torch.randint(5, config.vocab_size, (1, 40))
    model(ids)


def test_a_field_read_at_forward_takes_effect_after_building():
    """`cell_pooling` and `use_cell_residual` are read by every forward: editing them changes the outputs."""
    from ran_hf import RANModel

    torch.manual_seed(0)
    model = RANModel(tiny_config()).eval()
    ids = torch.randint(5, model.config.vocab_size, (1, 40))
    with torch.no_grad():
        before = model(ids)
        model.config.cell_pooling = "mean"
        pooled = model(ids)
        model.config.use_cell_residual = False
        no_residual = model(ids)
    assert not torch.allclose(before.last_cell, pooled.last_cell)
    assert not torch.allclose(pooled.last_hidden_state, no_residual.last_hidden_state)
