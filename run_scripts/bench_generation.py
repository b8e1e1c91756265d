"""Generation benchmark: cache size and per-token decode latency of RANForCausalLM against a GPT-2-style model.

    python run_scripts/bench_generation.py                       # contexts 1024 and 32768, base-like width
    python run_scripts/bench_generation.py --contexts 1024 8192 --decode-tokens 64 --out gen.json

Both models have the same width and depth (vocab 30522, D 768, 2 layers, 12 heads x 64; RAN window 256). For
each context length the prompt is prefilled through the model's cache in chunks, then `--decode-tokens` single
tokens are decoded one by one; reported: cache bytes after the prompt, median per-token latency, and for RAN the
size of the memory-review history (the only part that grows with the context).
"""

import argparse
import json
import statistics
import time

import torch


def ran_model(args):
    from ran_hf import RANConfig, RANForCausalLM

    config = RANConfig(vocab_size=30522, hidden_size=args.hidden, num_hidden_layers=args.layers,
                       num_attention_heads=args.heads, attention_head_size=args.hidden // args.heads,
                       window_size=args.window, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return RANForCausalLM(config).eval()


def gpt2_model(args, max_positions):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=30522, n_embd=args.hidden, n_layer=args.layers, n_head=args.heads,
                        n_positions=max_positions, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation="sdpa")
    return GPT2LMHeadModel(config).eval()


def cache_bytes(cache) -> int:
    if hasattr(cache, "num_bytes"):
        return cache.num_bytes()
    total = 0
    for layer in cache.layers:
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if tensor is not None:
                total += tensor.numel() * tensor.element_size()
    return total


@torch.inference_mode()
def measure(model, context: int, decode_tokens: int, chunk: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 30522, (1, context), generator=generator)
    cache = None
    start = time.perf_counter()
    for begin in range(0, context, chunk):
        out = model(prompt[:, begin : begin + chunk], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
    prefill = time.perf_counter() - start
    size = cache_bytes(cache)
    token = out.logits[:, -1:].argmax(-1)
    times = []
    for _ in range(decode_tokens):
        start = time.perf_counter()
        out = model(token, past_key_values=cache, use_cache=True)
        times.append(time.perf_counter() - start)
        cache = out.past_key_values
        token = out.logits[:, -1:].argmax(-1)
    result = dict(context=context, prefill_s=round(prefill, 3), cache_bytes_after_prompt=size,
                  decode_ms_median=round(1000 * statistics.median(times), 3),
                  decode_ms_p90=round(1000 * sorted(times)[int(0.9 * len(times))], 3))
    if hasattr(cache, "states"):
        history = sum(s.review_keys.numel() * s.review_keys.element_size() * 2 for s in cache.states)
        result["review_history_bytes"] = history
        result["fixed_state_bytes"] = size - history
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 32768])
    parser.add_argument("--decode-tokens", type=int, default=64, help="decode steps timed per context (> window)")
    parser.add_argument("--chunk", type=int, default=4096, help="prefill chunk size")
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--skip-gpt2", action="store_true")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.manual_seed(0)

    results = {"config": vars(args), "threads": torch.get_num_threads(), "ran": [], "gpt2": []}
    ran = ran_model(args)
    for context in args.contexts:
        results["ran"].append(measure(ran, context, args.decode_tokens, args.chunk))
        print("RAN ", json.dumps(results["ran"][-1]), flush=True)
    if not args.skip_gpt2:
        gpt2 = gpt2_model(args, max(args.contexts) + args.decode_tokens + 1)
        for context in args.contexts:
            results["gpt2"].append(measure(gpt2, context, args.decode_tokens, args.chunk))
            print("GPT2", json.dumps(results["gpt2"][-1]), flush=True)

    print(f"\n{'model':6} {'context':>8} {'cache MB':>10} {'decode ms/token':>16}")
    for name in ("ran", "gpt2"):
        for row in results[name]:
            print(f"{name:6} {row['context']:>8} {row['cache_bytes_after_prompt'] / 2**20:>10.2f} "
                  f"{row['decode_ms_median']:>16.2f}")
    if len(results["ran"]) >= 2:
        first, last = results["ran"][0], results["ran"][-1]
        print(f"RAN decode latency ratio {last['context']}/{first['context']}: "
              f"{last['decode_ms_median'] / first['decode_ms_median']:.2f}x; cache growth "
              f"{(last['cache_bytes_after_prompt'] - first['cache_bytes_after_prompt']) / 2**20:.2f} MB "
              f"(review history {(last['review_history_bytes'] - first['review_history_bytes']) / 2**20:.2f} MB)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
