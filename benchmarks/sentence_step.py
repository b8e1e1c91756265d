# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""Time one fine-tuning step (forward and backward through the sentence encoder and the head) of
`RANSentenceForSequenceClassification` on a batch of real documents, for several `encoder_batch_size` values,
interleaved so the machine's noise hits all of them alike; prints the median of each and the tokens that went
through the encoder.

    python -m benchmarks.sentence_step --data FILE.jsonl [--encoder DIR] [--batch 8] [--repeats 3] [--threads 1]
"""

import argparse
import json
import statistics
import time

import torch
from transformers import AutoTokenizer

from ran_hf import RANSentenceForSequenceClassification
from ran_hf.processing_sentences import DocumentSentenceProcessor, read_sentence_encoder_settings
from run_scripts.helpers.sentences import default_encoder_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="jsonl with a `text` field; the first --batch documents")
    parser.add_argument("--encoder", default=None, help="sentence-transformers folder (default: all-MiniLM-L6-v2)")
    parser.add_argument("--head", default="ran", choices=["aose", "ran"])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--chunks", type=int, nargs="+", default=[1_000_000, 64, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    encoder = args.encoder or default_encoder_path()
    with open(args.data, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(args.batch), f)]
    model = RANSentenceForSequenceClassification.from_sentence_encoder(
        encoder, head=args.head, num_labels=2, freeze_encoder=False).train()
    tokenizer = AutoTokenizer.from_pretrained(read_sentence_encoder_settings(encoder)["transformer_path"])
    batch = DocumentSentenceProcessor.for_model(model, tokenizer)(texts)
    labels = torch.zeros(len(texts), dtype=torch.long)
    real = batch["sentence_mask"].bool()
    print(f"{len(texts)} documents, {int(real.sum())} sentences, {int(batch['attention_mask'].sum())} real tokens, "
          f"longest sentence {batch['input_ids'].shape[-1]}; {args.threads} thread(s)")
    times = {chunk: [] for chunk in args.chunks}
    for _ in range(args.repeats):
        for chunk in args.chunks:
            model.config.encoder_batch_size = chunk
            model.zero_grad()
            start = time.perf_counter()
            model(**batch, labels=labels).loss.backward()
            times[chunk].append(time.perf_counter() - start)
    for chunk, seconds in times.items():
        print(f"encoder_batch_size {chunk:>8}: median {statistics.median(seconds):6.2f} s a step "
              f"({', '.join(f'{s:.2f}' for s in seconds)})")


if __name__ == "__main__":
    main()
