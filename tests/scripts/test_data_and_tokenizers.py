"""The scripts' data helpers read files and dataset folders with `datasets`, and every tokenizer the scripts load
leaves out `token_type_ids` (RAN has no token types)."""

import datasets
import pytest
from transformers import AutoTokenizer, BertTokenizerFast

from run_scripts.helpers import data_files
from run_scripts.helpers.tokenizer import load_tokenizer


def test_a_loaded_bert_tokenizer_and_its_saved_copy_leave_out_token_type_ids(tmp_path):
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"])}
    BertTokenizerFast(vocab=vocab).save_pretrained(tmp_path / "bert")
    tokenizer = load_tokenizer(str(tmp_path / "bert"))
    assert list(tokenizer("a b")) == ["input_ids", "attention_mask"]
    tokenizer.save_pretrained(tmp_path / "copy")
    assert list(AutoTokenizer.from_pretrained(tmp_path / "copy")("a b")) == ["input_ids", "attention_mask"]


def test_a_saved_dataset_folder_loads_offline_with_label_names(tmp_path):
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["sports", "politics"])})
    splits = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"text": ["goal team", "vote senate"], "label": [0, 1]}, features=features),
        "test": datasets.Dataset.from_dict({"text": ["match"], "label": [0]}, features=features)})
    splits.save_to_disk(str(tmp_path / "saved"))
    loaded = data_files.load_dataset_splits(str(tmp_path / "saved"))
    records = data_files.dataset_records(loaded["train"], ["label"], "--dataset_name 'saved'", text_field="text")
    assert [(r["_text"], r["label"], r["_line"]) for r in records] == [("goal team", "sports", 1),
                                                                       ("vote senate", "politics", 2)]
    with pytest.raises(ValueError, match=r"--dataset_name 'saved', line 1: no field 'topic'.*--label_column_name"):
        data_files.dataset_records(loaded["test"], ["topic"], "--dataset_name 'saved'", text_field="text")


def test_a_file_to_predict_on_may_lack_the_label_in_every_record_but_not_in_some(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text('{"text": "goal"}\n\n{"text": "vote"}\n')
    records = data_files.read_records(path, [], "test_file", text_field="text", optional_fields=["label"])
    assert [(r["_text"], r["_line"], "label" in r) for r in records] == [("goal", 1, False), ("vote", 3, False)]
    path.write_text('{"text": "goal", "label": "a"}\n{"text": "vote"}\n')
    with pytest.raises(ValueError, match=r"field 'label' is on line 1 but not on line 2"):
        data_files.read_records(path, [], "test_file", text_field="text", optional_fields=["label"])
