"""`RANConfig.sparse_prediction`: with labels, `RANForMaskedLM` runs its head only at the labelled positions. The loss,
the gradients and the logits at those positions must equal the dense head's; without the flag (the default) or
without labels, nothing changes."""

import pytest
import torch
from conftest import randomize, tiny_config

from ran_hf import RANConfig, RANForMaskedLM


def models():
    dense = randomize(RANForMaskedLM(tiny_config())).eval()
    sparse = RANForMaskedLM(tiny_config(sparse_prediction=True)).eval()
    sparse.load_state_dict(dense.state_dict())
    return dense, sparse


def batch(seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 97, (3, 37), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 30:] = 0  # a padded row
    input_ids[1, 30:] = 0
    labels = torch.full_like(input_ids, -100)
    picked = torch.rand(input_ids.shape, generator=generator) < 0.2
    picked[1, 30:] = False
    labels[picked] = torch.randint(0, 97, (int(picked.sum()),), generator=generator)
    return input_ids, attention_mask, labels


def test_default_is_dense():
    assert RANConfig().sparse_prediction is False


def test_same_loss_logits_and_gradients(one_thread):
    dense, sparse = models()
    input_ids, attention_mask, labels = batch()
    out_dense = dense(input_ids, attention_mask=attention_mask, labels=labels)
    out_sparse = sparse(input_ids, attention_mask=attention_mask, labels=labels)
    picked = labels != -100
    assert out_dense.logits.shape == (3, 37, 97)
    assert out_sparse.logits.shape == (int(picked.sum()), 97)
    torch.testing.assert_close(out_sparse.logits, out_dense.logits[picked], rtol=0, atol=1e-6)
    # the two losses reduce the same terms in another order: a loss of ~13 differs by a few float32 ulps (one ulp there
    # is 9.5e-7, so an absolute 1e-6 failed on AMD EPYC CPUs); 1e-6 relative is about 14 ulps
    torch.testing.assert_close(out_sparse.loss, out_dense.loss, rtol=1e-6, atol=0)
    out_dense.loss.backward()
    out_sparse.loss.backward()
    grads = dict(sparse.named_parameters())
    for name, p in dense.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_same_loss_with_num_items_in_batch(one_thread):
    """Trainer's gradient-accumulation normaliser (sum over the batch / items) goes through the same loss."""
    dense, sparse = models()
    input_ids, attention_mask, labels = batch(1)
    n = torch.tensor(int((labels != -100).sum()) + 5)
    loss_dense = dense(input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=n).loss
    loss_sparse = sparse(input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=n).loss
    torch.testing.assert_close(loss_sparse, loss_dense, rtol=1e-6, atol=0)


def test_without_labels_logits_are_dense(one_thread):
    dense, sparse = models()
    input_ids, attention_mask, _ = batch()
    torch.testing.assert_close(sparse(input_ids, attention_mask=attention_mask).logits,
                               dense(input_ids, attention_mask=attention_mask).logits, rtol=0, atol=0)


def test_bad_labels_still_fail_clearly():
    _, sparse = models()
    input_ids, attention_mask, labels = batch()
    with pytest.raises(ValueError, match="labels"):
        sparse(input_ids, attention_mask=attention_mask, labels=labels[:, :-1])


def test_round_trip(tmp_path):
    _, sparse = models()
    sparse.save_pretrained(tmp_path)
    assert RANForMaskedLM.from_pretrained(tmp_path).config.sparse_prediction is True
