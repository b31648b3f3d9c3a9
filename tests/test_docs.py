"""The docs hold together: docs/architecture.md's module map names every module of launcher/ and trainer/,
the README links every docs/ page, every relative link lands, and the README's two set-up commands are
the ones .ci/run runs and pyproject.toml can install.

Files read as text: no JAX, no DALI, a fraction of a second.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAP = DOCS / "architecture.md"
CI = ROOT / ".ci" / "run"
PACKAGES = ("launcher", "trainer")
PAGES = sorted(DOCS.glob("*.md"))

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)


def prose(text: str) -> str:
    """The text outside code: `[--rank R]` in a command is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def only_docstring(init: Path) -> bool:
    """An __init__.py that holds nothing but its docstring (and `from __future__`): its folder row stands
    for it. One with code (a registry, a factory) is a module of its own and needs its own row."""
    body = ast.parse(init.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return all(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in body)


def modules() -> list[str]:
    """What the map must name, relative to the repository root: every .py file, a package folder
    (`trainer/step/`) for a docstring-only __init__.py. __main__.py is an entry point: it is listed."""
    needed = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__init__.py" and only_docstring(path):
                needed.append(f"{path.parent.relative_to(ROOT).as_posix()}/")
            else:
                needed.append(path.relative_to(ROOT).as_posix())
    return needed


def map_rows() -> list[str]:
    """The first cell of every row of the table under '## The module map', without its backticks."""
    section = MAP.read_text().split("## The module map", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\|\s*`([^`]+)`\s*\|", section, re.M)


def test_the_map_names_every_module():
    rows = set(map_rows())
    missing = [m for m in modules() if m not in rows]
    assert not missing, f"docs/architecture.md's module map lacks a row for {missing}: add `| `PATH` | what |`"


def test_the_map_names_only_what_exists():
    rows = map_rows()
    gone = [r for r in rows if not (ROOT / r).exists()]
    twice = sorted({r for r in rows if rows.count(r) > 1})
    assert (gone, twice) == ([], []), f"rows for files that are gone: {gone}; rows given twice: {twice}"


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / t.split("#")[0]).resolve() for t in LINK.findall(prose(README.read_text()))}
    unlinked = [p.name for p in PAGES if p.resolve() not in linked]
    assert PAGES and not unlinked, f"README.md links no docs/ page {unlinked}: add it to the map of the docs"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "").lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


HTML_ANCHOR = re.compile(r'<a (?:name|id)="([^"]+)"></a>')  # an anchor kept for links made before a rename


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    found, seen = set(HTML_ANCHOR.findall(text)), {}
    for heading in HEADING.findall(text):
        base = slug(heading)
        found.add(f"{base}-{seen[base]}" if base in seen else base)
        seen[base] = seen.get(base, 0) + 1
    return found


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_lands(page):
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_python_api_page_shows_its_example_file_as_it_is():
    """docs/python-api.md's example is docs/python_api_example.py, character for character: the file that
    tests/test_api_runs.py runs."""
    section = (DOCS / "python-api.md").read_text().split("## How", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert code == (DOCS / "python_api_example.py").read_text()


def fenced(text: str) -> list[str]:
    return [block.split("\n", 1)[1].rsplit("```", 1)[0].strip() for block in FENCE.findall(text)]


def test_the_setup_commands_are_what_ci_runs_and_pyproject_installs():
    """The README's set-up names a command that installs an extra pyproject has, the script it declares,
    and `bash .ci/run`, whose statements (its pytest line, SLURM, munge, Fashion-MNIST, two nodes, the
    test extras) are what .ci/run does."""
    readme, ci = README.read_text(), CI.read_text()
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    blocks = fenced(setup)
    setup = " ".join(setup.split())  # prose wraps anywhere
    assert blocks[-1] == "bash .ci/run", blocks
    install = blocks[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = re.findall(r"pip install -e '\.\[([^\]]+)\]'", install)
    assert extras and set(extras[0].split(",")) <= set(project["optional-dependencies"]), install
    assert re.search(r"\.venv/bin/(\S+) train$", install).group(1) in project["scripts"], install
    ci_extras = set(re.search(r'pip install .*-e "\.\[([^\]]+)\]"', ci).group(1).split(","))
    assert {"cpu", "test"} <= ci_extras and "test extras" in setup, ci_extras

    pytest_line = re.search(r"^(\.venv/bin/python -m pytest [^<\n]*?)\s*(<|$)", ci, re.M).group(1)
    assert f"`{pytest_line}`" in setup, f"README's set-up should name .ci/run's test command `{pytest_line}`"
    apt = re.search(r"apt_packages=\(([^)]*)\)", ci).group(1).split()
    assert {"slurmctld", "munge", "dataset-fashion-mnist"} <= set(apt), apt
    assert "cluster.sh up --nodes 2" in ci and "two-node SLURM cluster" in setup


def test_the_readmes_fast_tier_command_follows_an_install_of_what_it_needs():
    """After the README's first command alone (`.[cpu]`: no pytest), its fast-tier command needs the test extras:
    the README installs them just before it, and that extra holds pytest."""
    setup = " ".join(README.read_text().split("## Set-up", 1)[1].split("\n## ", 1)[0].split())
    before, _, _ = setup.partition('.venv/bin/python -m pytest -m "not slow and not multiprocess and not slurm"')
    installs = re.findall(r"pip install -e '\.\[([^\]]+)\]'", before.rsplit("fast tier", 1)[-1])
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert installs and any(name.startswith("pytest") for x in installs[-1].split(",") for name in extras[x]), setup


def test_every_install_line_names_extras_that_exist():
    """`pip install -e '.[cuda13,bench]'` anywhere in the docs installs what pyproject.toml offers."""
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = []
    for page in [README, *PAGES]:
        for group in re.findall(r"""(?:\.|dali-launch)\[([a-z0-9,]+)\]['"]""", page.read_text()):
            named += [(page.name, extra) for extra in group.split(",")]
    unknown = [(page, extra) for page, extra in named if extra not in extras]
    assert named and not unknown, f"extras that pyproject.toml does not define: {unknown}"


def test_no_file_keeps_a_merge_conflict():
    """A conflict a merge left behind (its markers at a line's start) reads as nonsense in a page and breaks code."""
    import subprocess

    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    marker = re.compile(r"^(<{7}|>{7}) ", re.M)
    texts = [f for f in files if f.endswith((".py", ".md", ".sh", ".toml", ".txt")) and (ROOT / f).is_file()]
    left = [f for f in texts if marker.search((ROOT / f).read_text(errors="replace"))]
    assert not left, f"merge conflict markers left in {left}"


# What the product says, where a user reads it: the docs, the README, the benchmarks and the packages' code.
PRODUCT = [README, *PAGES, ROOT / "benchmarks", ROOT / "launcher", ROOT / "trainer"]
HISTORY = ROOT / "benchmarks" / "HISTORY.md"  # the one dated log of runs and rounds of work
ELSEWHERE: set[str] = set()  # pages a rule leaves out while another branch rewrites them (none now)
WORK_ITEM = re.compile(r"issue ?[0-9]+|session[0-9]|stop[0-9]", re.I)
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def product_files() -> list[Path]:
    files = []
    for root in PRODUCT:
        for path in [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()):
            if "__pycache__" not in path.parts and path.suffix not in (".png", ".pyc"):
                files.append(path)
    return files


def hits(pattern: re.Pattern, files: list[Path]) -> list[str]:
    found = []
    for path in files:
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # a data file (the embedded MNIST sample's .gz): no prose in it
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{number}: {m.group(0)}" for m in pattern.finditer(line)]
    return found


def split_elsewhere(found: list[str]) -> tuple[list[str], list[str]]:
    elsewhere = [h for h in found if h.split(":")[0] in ELSEWHERE]
    return [h for h in found if h not in elsewhere], elsewhere


def test_no_work_item_names_in_the_product():
    """The product speaks to its users: no issue numbers, sessions or attempts in its pages, benchmarks
    (results included) or code; a round of work is a date in benchmarks/HISTORY.md, if anything."""
    ours, _ = split_elsewhere(hits(WORK_ITEM, product_files()))
    assert not ours, f"work-item names (say what and why instead): {ours}"


def test_dates_and_commits_only_in_the_history():
    """A page gives the current figure with its command; when it was measured, on which commit, and what it
    replaced live in benchmarks/HISTORY.md and in each result file."""
    pages = [README, *PAGES, ROOT / "benchmarks" / "README.md", ROOT / "benchmarks" / "results" / "README.md"]
    ours, _ = split_elsewhere(hits(DATE, pages) + hits(COMMIT, pages))
    assert not ours, f"dates or commit hashes outside benchmarks/HISTORY.md: {ours}"
    assert HISTORY.exists() and DATE.search(HISTORY.read_text())


def named_paths(page: Path) -> list[str]:
    """Repository paths a page names in code: `benchmarks/...`, `trainer/...`, `launcher/...`, `tests/...`."""
    names = []
    for span in CODE_SPAN.findall(page.read_text()):
        names += re.findall(r"(?<![\w/.])((?:benchmarks|trainer|launcher|tests)/[\w./*-]*[\w*/])", span)
    return names


@pytest.mark.parametrize(
    "page",
    [README, *PAGES, ROOT / "benchmarks" / "README.md", ROOT / "benchmarks" / "results" / "README.md"],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_path_a_page_names_exists(page):
    name = page.relative_to(ROOT).as_posix()
    if name in ELSEWHERE:
        pytest.xfail(f"{name} is being rewritten on another branch")
    gone = [p for p in named_paths(page) if not (any(ROOT.glob(p)) if "*" in p else (ROOT / p).exists())]
    assert not gone, f"{name} names paths that do not exist: {gone}"


# A Python file named in code or docs, with or without its folders (`plan/step.py`, `step.py`), is one of the
# repository's; a pattern (`records/<format>.py`) names none. Others' files are named as theirs here; the history
# and the results' records keep what was.
OTHERS = {
    "examples/imagenet/models.py": "Flax's ResNet example",
    "models/vit.py": "big_vision's ViT",
    "tools/wds2idx.py": "DALI's WebDataset indexer",
    "file.py": "a user's file, in a message's example",
    "own.py": "a user's file, in a message's example",
    "digits.py": "the user's own task, which docs/tasks.md has them save",
}
PY_FILE = re.compile(r"(?<![\w./<>*{-])((?:[\w-]+/)*[\w-]+\.py)\b")
SHELL_FOLDER = re.compile(r"\$\{?\w+\}?/")  # `$here/tasks.py` is benchmarks/tasks.py
DOTTED = re.compile(r"\bdali_launch(?:\.\w+)+")


def tracked() -> list[str]:
    """The repository's files, those not committed yet among them (not what .gitignore leaves out)."""
    import subprocess

    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]
    return subprocess.run(listed, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()


def module_names() -> dict[str, Path]:
    """`dali_launch.trainer.plan.step` -> its file, for every module of the two packages."""
    names = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT).with_suffix("").parts if p != "__init__"]
            names[".".join(["dali_launch", *parts])] = path
    return names


def public_names() -> list[str]:
    """What `import dali_launch` gives (its names are imported on first use: the package itself imports nothing)."""
    import dali_launch

    return dali_launch.__all__


def defines(path: Path, name: str) -> bool:
    """Whether module `path` defines or imports `name` at its top level."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and name in [a.asname or a.name for a in node.names]:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def test_every_module_a_file_or_page_names_exists():
    files, modules_ = tracked(), module_names()
    texts = [f for f in product_files() if f.suffix in (".py", ".md", ".sh", ".toml") and f != HISTORY]
    gone = []
    for path, line in ((p, line) for p in texts for line in p.read_text().splitlines()):
        for name in PY_FILE.findall(SHELL_FOLDER.sub("", line)):
            if name not in OTHERS and not any(f == name or f.endswith(f"/{name}") for f in files):
                gone.append(f"{path.relative_to(ROOT)}: {name}")
        for dotted in DOTTED.findall(line):
            parts = dotted.split(".")
            if len(parts) == 2 and parts[1] in public_names():  # `import dali_launch`'s own (dali_launch/__init__.py)
                continue
            known = next((k for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules_), 0)
            rest = parts[known:]
            if not known or len(rest) > 1 or (rest and not defines(modules_[".".join(parts[:known])], rest[0])):
                gone.append(f"{path.relative_to(ROOT)}: {dotted}")
    assert not gone, f"code or docs name modules that do not exist: {gone}"


RESULTS = ROOT / "benchmarks" / "results"
MACHINES = {"h200", "h200-x2", "cpu-2core"}  # benchmarks/results/README.md says what each is
RUN_KEYS = {"command", "commit", "date", "machine", "result"}


def test_results_are_laid_out_by_benchmark_and_machine():
    """benchmarks/results/BENCHMARK/MACHINE.json: BENCHMARK a script of benchmarks/ (train: dali-launch
    train itself), MACHINE a known one, each run holding its command, commit and date; a chart beside its JSON."""
    wrong = []
    for path in sorted(p for p in RESULTS.rglob("*") if p.is_file() and p != RESULTS / "README.md"):
        rel = path.relative_to(RESULTS)
        benchmark, machine = rel.parts[0], path.stem
        script = ROOT / "benchmarks" / f"{benchmark}.py"
        if len(rel.parts) != 2 or machine not in MACHINES or not (script.exists() or benchmark == "train"):
            wrong.append(f"{rel}: not BENCHMARK/MACHINE with a script and a machine of {sorted(MACHINES)}")
        elif path.suffix == ".png":
            wrong += [] if path.with_suffix(".json").exists() else [f"{rel}: a chart without its JSON"]
        elif path.suffix != ".json":
            wrong.append(f"{rel}: neither .json nor .png")
        else:
            doc = json.loads(path.read_text())
            for run in doc if isinstance(doc, list) else [doc]:
                if not RUN_KEYS <= set(run) or not re.fullmatch(r"20\d\d-\d\d-\d\d", str(run.get("date"))):
                    wrong.append(f"{rel}: a run without {sorted(RUN_KEYS - set(run))} or a YYYY-MM-DD date")
    assert not wrong, wrong


def test_every_benchmark_script_has_a_test():
    """A script in benchmarks/ is named by a test, or is a module a tested script imports."""
    tests = " ".join(p.read_text() for p in (ROOT / "tests").glob("*.py"))
    scripts = {p.stem: p.read_text() for p in (ROOT / "benchmarks").glob("*.py")}
    tested = {name for name in scripts if f"{name}.py" in tests or f'"{name}"' in tests}
    imports = lambda text: set(re.findall(r"^\s*(?:from|import) (\w+)", text, re.M))
    grew = True
    while grew:
        reached = {m for name in tested for m in imports(scripts[name]) if m in scripts} - tested
        grew, tested = bool(reached), tested | reached
    untested = sorted(set(scripts) - tested)
    assert not untested, f"benchmark scripts no test drives: {untested}"


def test_the_contrastive_commands_are_the_ones_its_tests_run():
    """docs/tasks.md's contrastive commands (a minute each on two cores) are tests/test_contrastive.py's: the same
    flags, on a set the size of conftest's synth_sets."""
    section = (DOCS / "tasks.md").read_text().split("## Contrastive", 1)[1].split("\n## ", 1)[0]
    commands = " ".join(fenced(section)[0].replace("\\\n", " ").split())
    tests, conftest = (ROOT / "tests" / "test_contrastive.py").read_text(), (ROOT / "tests" / "conftest.py").read_text()
    for flag in ("--num-classes", "--image-size", "--global-batch-size", "--learning-rate", "--epochs"):
        value = re.search(rf'"{flag}", "([^"]+)"', tests).group(1)
        assert commands.count(f"{flag} {value} ") + commands.endswith(f"{flag} {value}") == 2, (flag, value)
    sizes = re.search(r"synth_sets.*?train=(\d+), test=(\d+), image_scale=([\d.]+)", conftest, re.S).groups()
    assert "--train {} --test {} --image-scale {}".format(*sizes) in commands, (sizes, commands)
