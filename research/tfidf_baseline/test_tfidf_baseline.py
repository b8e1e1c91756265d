# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""The TF-IDF baseline's feature selection and its argument checks (research/tfidf_baseline/tfidf_baseline.py).
Offline, CPU, a few seconds."""

import numpy as np
import pytest

from research.tfidf_baseline import tfidf_baseline as tfidf


@pytest.mark.parametrize("min_df,max_features", [(1, None), (2, None), (1, 7), (2, 5)])
def test_tfidf_feature_selection_matches_vectorizer(min_df, max_features):
    """Selecting columns of one count matrix gives TfidfVectorizer's vocabulary for that min_df / max_features."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    texts = ["the cat sat on the mat", "the dog sat", "a cat and a dog", "the mat was red", "red cat red dog"]
    counter = CountVectorizer(ngram_range=(1, 2))
    counts = counter.fit_transform(texts).tocsr()
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    keep = tfidf.features(counts, df, min_df, max_features)
    names = counter.get_feature_names_out()[keep]
    expected = TfidfVectorizer(ngram_range=(1, 2), min_df=min_df, max_features=max_features).fit(texts)
    assert sorted(names) == sorted(expected.get_feature_names_out())


def test_tfidf_missing_data_dir_is_a_clear_error(tmp_path):
    """A missing --data_dir stops the command line; a data folder without the dataset's files names --data_dir."""
    with pytest.raises(SystemExit):
        tfidf.main(["--data_dir", str(tmp_path / "nowhere")])
    with pytest.raises(FileNotFoundError, match="--data_dir"):
        tfidf.load("imdb", tmp_path)
