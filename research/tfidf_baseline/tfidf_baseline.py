"""TF-IDF (word 1-2 grams) + logistic regression: the practitioner's floor for the long-document benchmarks.

Settings (C, min_df, sublinear_tf, max_features) are chosen on a dev split carved from TRAIN (stratified 10%, seed
0) by dev accuracy; the chosen setting is refitted on the full train split and scored once on the official test
split: accuracy and macro-F1, overall and for documents of at most / more than 512 WordPiece tokens (the dataset's
committed tokenizer in `research/compare_long_docs/tokenizers/<dataset>/`, [CLS] and [SEP] included).

    python -m research.tfidf_baseline.tfidf_baseline --data_dir DATA

The committed results (`research/tfidf_baseline/results/`) use the full grid for Hyperpartisan and IMDB and, for
time (20 Newsgroups' 20-class fits on a shared 2-core machine), a smaller one for 20 Newsgroups:

    python -m research.tfidf_baseline.tfidf_baseline --data_dir DATA --datasets hyperpartisan imdb
    python -m research.tfidf_baseline.tfidf_baseline --data_dir DATA --datasets 20newsgroups \
        --C 10 100 --min_df 2 --max_features 200000
    python -m research.tfidf_baseline.tfidf_baseline --data_dir DATA   # table of all three

Writes `results.json` and `table.md` in `research/tfidf_baseline/results/` (`--output_dir` to change); every dev
try and finished dataset is also kept under `<output_dir>/work/`, so a stopped run resumes, and datasets can run in
separate processes (`--datasets imdb`, ...) before one last call that writes the table of all three.
The n-gram counting runs once per fit split; min_df / max_features / sublinear tf are applied to the count matrix,
which gives the same features as `TfidfVectorizer` with those settings.
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split

from research.compare_long_docs.data import read_official_splits

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parent / "results"
TOKENIZERS = REPO / "research" / "compare_long_docs" / "tokenizers"  # one WordPiece tokenizer per dataset
DATASETS = ("hyperpartisan", "imdb", "20newsgroups")
LONG = 512
GRID = {"C": (1.0, 10.0, 100.0), "min_df": (1, 2), "sublinear_tf": (False, True), "max_features": (None, 200_000)}
# every dev try and every finished dataset is kept under <output_dir>/work/, so a stopped run resumes where it was


def load(name: str, data_dir: Path) -> tuple[list[str], np.ndarray, list[str], np.ndarray]:
    """Full train and official test split: texts and labels, read as the comparison reads them."""
    train_x, train_y, test_x, test_y, _ = read_official_splits(name, data_dir)
    return train_x, train_y, test_x, test_y


def token_lengths(name: str, texts: list[str]) -> np.ndarray:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
    tokenizer.no_truncation()
    return np.array([len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True)])


def features(counts, fitted_df: np.ndarray, min_df: int, max_features: int | None) -> np.ndarray:
    """Columns kept by `min_df` and then `max_features` (highest total count), as TfidfVectorizer chooses them."""
    keep = np.flatnonzero(fitted_df >= min_df)
    if max_features is not None and len(keep) > max_features:
        totals = np.asarray(counts[:, keep].sum(0)).ravel()
        keep = keep[np.sort(np.argsort(-totals, kind="stable")[:max_features])]
    return keep


def fit_score(train_counts, train_y, eval_counts, setting: dict, seed: int = 0):
    df = np.bincount(train_counts.indices, minlength=train_counts.shape[1])
    keep = features(train_counts, df, setting["min_df"], setting["max_features"])
    tfidf = TfidfTransformer(sublinear_tf=setting["sublinear_tf"])
    x_train = tfidf.fit_transform(train_counts[:, keep])
    x_eval = tfidf.transform(eval_counts[:, keep])
    classifier = LogisticRegression(C=setting["C"], max_iter=2000, random_state=seed)
    classifier.fit(x_train, train_y)
    return classifier.predict(x_eval), len(keep)


def metrics(y: np.ndarray, pred: np.ndarray) -> dict:
    return {"n": int(len(y)), "accuracy": round(float(accuracy_score(y, pred)), 4),
            "macro_f1": round(float(f1_score(y, pred, average="macro")), 4)}


def run_dataset(name: str, data_dir: Path, work: Path, grid: dict) -> dict:
    done_path, tries_path = work / f"{name}.json", work / f"{name}.tries.jsonl"
    if done_path.is_file():
        return json.loads(done_path.read_text())
    start = time.perf_counter()
    train_x, train_y, test_x, test_y = load(name, data_dir)
    fit_idx, dev_idx = train_test_split(np.arange(len(train_y)), test_size=0.1, stratify=train_y, random_state=0)
    counter = CountVectorizer(ngram_range=(1, 2), lowercase=True)
    fit_counts = counter.fit_transform([train_x[i] for i in fit_idx])
    dev_counts = counter.transform([train_x[i] for i in dev_idx])
    tries = [json.loads(line) for line in tries_path.read_text().splitlines()] if tries_path.is_file() else []
    for values in itertools.product(*grid.values()):
        setting = dict(zip(grid, values))
        if any(all(t[k] == v for k, v in setting.items()) for t in tries):
            continue
        pred, num_features = fit_score(fit_counts, train_y[fit_idx], dev_counts, setting)
        tries.append({**setting, "num_features": num_features, "dev": metrics(train_y[dev_idx], pred)})
        with tries_path.open("a") as f:
            f.write(json.dumps(tries[-1]) + "\n")
        print(f"  {name} {setting}: dev acc {tries[-1]['dev']['accuracy']:.4f}", flush=True)
    best = max(tries, key=lambda t: (t["dev"]["accuracy"], t["dev"]["macro_f1"]))
    chosen = {k: best[k] for k in GRID}
    counter = CountVectorizer(ngram_range=(1, 2), lowercase=True)
    train_counts = counter.fit_transform(train_x)
    test_counts = counter.transform(test_x)
    pred, num_features = fit_score(train_counts, train_y, test_counts, chosen)
    lengths = token_lengths(name, test_x)
    short = lengths <= LONG
    result = {
        "dataset": name, "train_documents": int(len(train_y)), "dev_documents": int(len(dev_idx)),
        "grid": grid, "chosen": chosen, "num_features": num_features, "dev": best["dev"],
        "test": metrics(test_y, pred), "test_short": metrics(test_y[short], pred[short]),
        "test_long": metrics(test_y[~short], pred[~short]), "seconds": round(time.perf_counter() - start, 1),
        "tries": tries,
    }
    done_path.write_text(json.dumps(result) + "\n")
    return result


def table(results: list[dict]) -> str:
    lines = ["| dataset | test docs (<= 512 / > 512) | chosen on dev (C, min_df, sublinear_tf, max_features) | dev acc |"
             " test acc | test macro-F1 | acc <= 512 | acc > 512 | macro-F1 > 512 |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        c = r["chosen"]
        lines.append(
            f"| {r['dataset']} | {r['test']['n']} ({r['test_short']['n']} / {r['test_long']['n']}) | "
            f"{c['C']:g}, {c['min_df']}, {c['sublinear_tf']}, {c['max_features']} | {r['dev']['accuracy']:.3f} | "
            f"{r['test']['accuracy']:.3f} | {r['test']['macro_f1']:.3f} | {r['test_short']['accuracy']:.3f} | "
            f"{r['test_long']['accuracy']:.3f} | {r['test_long']['macro_f1']:.3f} |")
    lines.append("")
    lines.append("Documents are counted with the dataset's WordPiece tokenizer in "
                 "research/compare_long_docs/tokenizers/<dataset>/, [CLS] and [SEP] included.")
    lines.append("")
    lines.append("Settings tried on dev (C x min_df x sublinear_tf x max_features, word 1-2 grams, L2 logistic regression):")
    for r in results:
        grid = r.get("grid", GRID)
        lines.append(f"- {r['dataset']}: " + "; ".join(f"{k} {list(v)}" for k, v in grid.items()))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", type=Path, required=True, help="folder with hyperpartisan/, imdb/, 20newsgroups/")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--output_dir", type=Path, default=RESULTS)
    parser.add_argument("--C", type=float, nargs="+", default=list(GRID["C"]), help="inverse regularisation tried")
    parser.add_argument("--min_df", type=int, nargs="+", default=list(GRID["min_df"]))
    parser.add_argument("--sublinear_tf", type=int, nargs="+", choices=[0, 1], default=[0, 1])
    parser.add_argument("--max_features", type=int, nargs="+", default=[0, 200_000], help="0: no limit")
    args = parser.parse_args(argv)
    if not args.data_dir.is_dir():
        parser.error(f"--data_dir {args.data_dir} is not a folder; pass the shared data folder (the project's evaluation data).")
    work = args.output_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    grid = {"C": args.C, "min_df": args.min_df, "sublinear_tf": [bool(v) for v in args.sublinear_tf],
            "max_features": [v or None for v in args.max_features]}
    results = [run_dataset(name, args.data_dir, work, grid) for name in args.datasets]
    (args.output_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.output_dir / "table.md").write_text(table(results))
    print(table(results))
    return results


if __name__ == "__main__":
    main()
