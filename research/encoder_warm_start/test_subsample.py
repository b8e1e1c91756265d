import collections

from research.encoder_warm_start.subsample import stratified_sample


def test_a_stratified_sample_keeps_each_labels_share_and_is_reproducible():
    rows = [{"text": str(i), "label": i % 3 if i < 600 else 0} for i in range(900)]  # shares 5/9, 2/9, 2/9
    sample = stratified_sample(rows, 90, seed=0)
    assert collections.Counter(row["label"] for row in sample) == {0: 50, 1: 20, 2: 20}
    assert len({row["text"] for row in sample}) == 90
    assert sample == stratified_sample(rows, 90, seed=0) and sample != stratified_sample(rows, 90, seed=1)
