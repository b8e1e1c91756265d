"""Repository checks that are not unit tests: the scripts, studies and benchmarks import their helpers the normal way
and name no machine path, since a user's clone has neither this machine's folders nor a `shared/` folder next to it.

Run from anywhere: `python .ci/check_layout.py`; exits non-zero and lists every offending line."""

import pathlib
import re
import sys


ROOT = pathlib.Path(__file__).resolve().parents[1]
FOLDERS = ["run_scripts", "research", "benchmarks"]
FORBIDDEN = {
    "a sys.path edit": re.compile(r"sys\.path\.(insert|append)|sys\.path\[:?\d*\]\s*="),
    "a machine path": re.compile(r"(?<![\w>)\]])(/work/|/opt/|/home/|/root/)"),  # not `<output_dir>/work/`
    "a folder outside the repository": re.compile(r"REPO_ROOT\.parent|parents\[2\]\s*/\s*\"shared\"|\.\./shared"),
}


def offending_lines():
    for folder in FOLDERS:
        files = sorted((ROOT / folder).rglob("*.py"))
        if not files:
            yield f"{folder}/: no Python files (moved?)"
        for path in files:
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                for what, pattern in FORBIDDEN.items():
                    if pattern.search(line):
                        yield f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}"


if __name__ == "__main__":
    found = list(offending_lines())
    print("\n".join(found) if found else "layout check: ok")
    sys.exit(1 if found else 0)
