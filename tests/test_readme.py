# Copyright 2026 The ran_hf authors. Licensed under the Apache License, Version 2.0.
"""README.md as a user meets it: every ```python block runs verbatim, in order, in one fresh offline Python process
whose working directory stands in for a clone's root (`pretrained/` and `tests/` linked in, so what the blocks write
lands in a temporary folder); the outputs the README promises are printed; every relative link resolves; the
markers CI reads are in the form `.ci/run` parses."""

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINKED_DOCS = [README, ROOT / "docs" / "results.md", ROOT / "docs" / "speed.md", ROOT / "docs" / "converting.md"]

# Runs in the child process: each block compiled under its README line, so a traceback points at README.md:LINE.
RUNNER = textwrap.dedent("""
    import contextlib, io, json, sys, time
    blocks = json.load(open(sys.argv[1]))
    namespace, printed = {"__name__": "__main__"}, []
    for block in blocks:
        start, out = time.perf_counter(), io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block["code"], "README.md:%d" % block["line"], "exec"), namespace)
        printed.append(out.getvalue())
        sys.stderr.write("README.md:%d ran in %.1f s\\n" % (block["line"], time.perf_counter() - start))
    json.dump(printed, open(sys.argv[2], "w"))
""")


def python_blocks(text: str) -> list[dict]:
    """Every ```python block of `text`: its code and the README line of its first code line."""
    blocks = []
    for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        blocks.append({"line": text.count("\n", 0, match.start(1)) + 1, "code": match.group(1)})
    return blocks


def marked_block(text: str, marker: str) -> str:
    """The body of the first fenced block after `<!-- marker -->`, as `.ci/run`'s awk reads it."""
    match = re.search(rf"<!-- {marker} -->\n```\w*\n(.*?)\n```", text, re.S)
    assert match, f"README.md lost its `<!-- {marker} -->` block"
    return match.group(1)


def test_every_python_block_runs_offline_in_order(tmp_path):
    blocks = python_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    work = tmp_path / "clone"
    work.mkdir()
    for name in ("pretrained", "tests"):  # what the blocks read from the repository root
        (work / name).symlink_to(ROOT / name)
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", RUNNER, str(tmp_path / "blocks.json"), str(tmp_path / "out.json")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"a README block failed:\n{done.stderr[-6000:]}"
    print("".join(line + "\n" for line in done.stderr.splitlines() if line.endswith(" s") and " ran in " in line))
    printed = json.loads((tmp_path / "out.json").read_text())

    quickstart = printed[0].splitlines()  # the first block: the fill-mask predictions, the labels, the padding check
    assert quickstart[0].startswith("[('have', "), quickstart
    assert quickstart[1].endswith(" True"), quickstart
    generation = next(out for block, out in zip(blocks, printed) if ".generate(" in block["code"])
    assert generation.split() == ["True"], generation  # two prefill chunks give the logits of one pass
    encoder = next(out for block, out in zip(blocks, printed) if "convert_encoder(" in block["code"])
    assert encoder.strip() == "torch.Size([1, 4973, 384])", encoder  # the whole book, every word piece
    assert (work / "ran.onnx").is_file() and (work / "ran-lora" / "adapter_config.json").is_file()


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, punctuation other than `-` and `_` dropped, spaces to
    `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {github_anchor(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links that do not resolve: {broken}"


def test_ci_markers_keep_the_form_ci_run_parses():
    text = README.read_text(encoding="utf-8")
    main = marked_block(text, "main-command")
    assert "\n" not in main and main.endswith(" && python run_scripts/run_classification.py"), main
    assert main.startswith("pip install "), main
    test = marked_block(text, "test-command")
    assert "\n" not in test and "python -m pytest" in test, test
