"""The documentation is true: the Python blocks of the README and of the documentation pages and the
docstrings' examples run, the design document names every public name, the API reference documents
every one, links resolve, the function table is current, and the public API has type hints.

Each ```python block of README.md and of the Markdown pages under docs/ runs on its own in a fresh
interpreter (a block may register a rule, which must not leak into other tests), from the repository
root, so the checkout's package is the one imported; a ```text block after it, with nothing but blank
lines between them, is what it must print.  Docstring examples run as doctests with ``np`` and ``db``
as their only globals, so each example defines what it uses.  The site itself is built, warnings as
errors, by .ci/run (docs/development.md).
"""

import doctest
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

import dualbroadcast as db
from dualbroadcast.numpy_facts import qualified_name
from dualbroadcast.registry import NONDIFFERENTIABLE
from dualbroadcast.rules import BUILTIN_NONDIFFERENTIABLE, BUILTIN_RULES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DESIGN = DOCS / "design.md"
PAGES = [README] + sorted(DOCS.rglob("*.md"))
API_REFERENCE = DOCS / "api.rst"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)


class Block(NamedTuple):
    """A ```python block: the line of its first line of code, its code, and the ```text block after it."""

    line: int
    source: str
    output: str | None


def python_blocks(text):
    """The ```python blocks of a Markdown text, each with the ```text block after it (only blank lines
    between them), if any."""
    fences = list(FENCE.finditer(text))
    blocks = []
    for k, fence in enumerate(fences):
        if fence.group(1) != "python":
            continue
        after = fences[k + 1] if k + 1 < len(fences) else None
        adjacent = after and not text[fence.end():after.start()].strip()
        output = after.group(2) if adjacent and after.group(1) == "text" else None
        blocks.append(Block(text.count("\n", 0, fence.start()) + 2, fence.group(2), output))
    return blocks


def run_block(block, name):
    """Run ``block`` of the file ``name`` in a fresh interpreter; an exception, or output other than
    its text block, is an AssertionError naming the block's first line."""
    source = "\n" * (block.line - 1) + block.source  # the traceback's line numbers are the file's
    result = subprocess.run([sys.executable, "-"], input=source, capture_output=True, text=True, cwd=ROOT,
                            timeout=600)
    where = f"{name}: the python block at line {block.line}"
    if result.returncode != 0:
        raise AssertionError(f"{where} failed (line numbers below are {name}'s):\n{result.stderr}")
    if block.output is not None and result.stdout != block.output:
        raise AssertionError(f"{where} printed\n{result.stdout}instead of the text block after it:\n{block.output}")


def page_name(path):
    """``path`` as the repository names it (``docs/guide/complex.md``)."""
    return path.relative_to(ROOT).as_posix()


PAGE_BLOCKS = [(page_name(path), block) for path in PAGES for block in python_blocks(path.read_text())]


@pytest.mark.parametrize("name, block", PAGE_BLOCKS, ids=[f"{name}:{block.line}" for name, block in PAGE_BLOCKS])
def test_python_block_runs_on_its_own(name, block):
    run_block(block, name)


def test_every_guide_page_has_an_example_that_prints_what_it_shows():
    checked = {name for name, block in PAGE_BLOCKS if block.output is not None}
    guide = {page_name(path) for path in (DOCS / "guide").glob("*.md")}
    assert guide and guide <= checked, f"no python block with its printed output in {sorted(guide - checked)}"


def test_a_broken_block_fails_and_names_its_line():
    text = "# T\n\n```python\nimport numpy as np\nnp.undefined\n```\n\n```python\nprint(1)\n```\n\n```text\n2\n```\n"
    broken, wrong_output = python_blocks(text)
    assert (broken.line, wrong_output.line, wrong_output.output) == (4, 9, "2\n")
    with pytest.raises(AssertionError, match=r"(?s)T\.md: the python block at line 4 failed.*line 5.*AttributeError"):
        run_block(broken, "T.md")
    with pytest.raises(AssertionError, match=r"line 9 printed\n1\ninstead of the text block after it:\n2"):
        run_block(wrong_output, "T.md")


# --- docstring examples ----------------------------------------------------------------------------
MODULES = ["dualbroadcast"] + sorted(m.name for m in pkgutil.walk_packages(db.__path__, "dualbroadcast."))


def run_doctests(module):
    """``(failed, attempted, report)`` of the docstring examples of ``module``."""
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    report = []
    for test in doctest.DocTestFinder().find(module, globs={"np": np, "db": db}):
        runner.run(test, out=report.append)
    failed, attempted = runner.summarize(verbose=False)
    return failed, attempted, "".join(report)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    failed, _, report = run_doctests(importlib.import_module(name))
    assert not failed, report


def test_a_wrong_docstring_example_fails():
    module = types.ModuleType("wrong")
    module.__doc__ = ">>> db.gradient(lambda x: x * x, 3.0)\n7.0\n"
    failed, attempted, report = run_doctests(module)
    assert (failed, attempted) == (1, 1)
    assert "Expected:\n    7.0\nGot:\n    6.0" in report


def test_the_entry_points_have_examples():
    examples = {name for name in db.__all__ if ">>>" in (getattr(db, name).__doc__ or "")}
    assert {"gradient", "value_and_gradient", "pullback", "jacobian", "broadcast", "sum", "cut",
            "prepare_gradient", "explain", "defvjp"} <= examples


# --- the design document and links ------------------------------------------------------------------
def test_the_design_document_names_every_public_name():
    text = DESIGN.read_text()
    missing = [name for name in db.__all__ if not re.search(rf"`(db\.)?{name}\b", text)]
    assert not missing, f"docs/design.md does not describe {missing}"


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_relative_links_resolve(path):
    targets = re.findall(r"\]\(([^)#\s]+)[^)]*\)", path.read_text())
    broken = [t for t in targets if "://" not in t and not (path.parent / t).exists()]
    assert not broken, f"{page_name(path)} links to missing files: {broken}"


def test_every_page_is_linked_from_the_readme_or_the_site():
    linked = {(path.parent / target).resolve() for path in PAGES
              for target in re.findall(r"\]\(([^)#\s]+)[^)]*\)", path.read_text())}
    in_a_toctree = {(DOCS / f"{entry}.md").resolve()
                    for toctree in re.findall(r"```\{toctree\}\n(.*?)```", (DOCS / "index.md").read_text(), re.DOTALL)
                    for entry in toctree.splitlines() if entry and not entry.startswith(":")}
    orphans = [page_name(path) for path in PAGES[1:] if path.resolve() not in linked | in_a_toctree]
    assert not orphans, f"no link or toctree entry leads to {orphans}"


def test_readme_and_package_docstring_point_at_the_design_document():
    assert "docs/design.md" in README.read_text() and "docs/design.md" in db.__doc__


# --- the API reference -----------------------------------------------------------------------------
def documented_names():
    """The names docs/api.rst renders with autodoc, a module with ``:members:`` giving its ``__all__``."""
    text = API_REFERENCE.read_text()
    names = set(re.findall(r"^\.\. auto(?:function|class|exception):: ([\w.]+)", text, re.MULTILINE))
    for module in re.findall(r"^\.\. automodule:: ([\w.]+)\n   :members:", text, re.MULTILINE):
        names |= {f"{module}.{name}" for name in importlib.import_module(module).__all__}
    return names


def public_names():
    """Every public name a user reaches: ``db.__all__`` and the SciPy mirrors (a distribution by its class)."""
    names = {f"dualbroadcast.{name}" for name in db.__all__}
    for module_name in ("dualbroadcast.scipy.special", "dualbroadcast.scipy.stats", "dualbroadcast.scipy.signal",
                        "dualbroadcast.scipy.integrate", "dualbroadcast.scipy.linalg"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            names.add(f"{module_name}.{name if inspect.isfunction(obj) else type(obj).__name__}")
    return names


def test_the_api_reference_documents_every_public_name():
    pytest.importorskip("scipy")
    missing, unknown = public_names() - documented_names(), documented_names() - public_names()
    assert not missing, f"docs/api.rst does not document {sorted(missing)}"
    assert not unknown, f"docs/api.rst documents names that are not public: {sorted(unknown)}"


# --- type hints ------------------------------------------------------------------------------------
_PUBLIC_DUNDERS = {"__init__", "__call__", "__enter__", "__exit__"}


def public_functions():
    """``(name, function)`` for every function in ``db.__all__`` and the public methods of its classes
    written in this package (exceptions have none of their own)."""
    for name in db.__all__:
        obj = getattr(db, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and not issubclass(obj, (Exception, tuple)):
            for attribute, member in vars(obj).items():
                if inspect.isfunction(member) and (not attribute.startswith("_") or attribute in _PUBLIC_DUNDERS):
                    yield f"{name}.{attribute}", member


PUBLIC_FUNCTIONS = list(public_functions())


@pytest.mark.parametrize("name, function", PUBLIC_FUNCTIONS, ids=[name for name, _ in PUBLIC_FUNCTIONS])
def test_public_function_has_type_hints(name, function):
    signature = inspect.signature(function)
    missing = [p.name for p in signature.parameters.values() if p.annotation is p.empty and p.name != "self"]
    assert not missing, f"db.{name}: no type hint for {missing}"
    assert signature.return_annotation is not signature.empty, f"db.{name}: no return type hint"
    typing.get_type_hints(function)  # every hint names something that exists


def test_type_hints_cover_functions_and_methods():
    names = {name for name, _ in PUBLIC_FUNCTIONS}
    assert {"gradient", "primitive", "PreparedGradient.__call__", "kernel_log.__enter__"} <= names


def test_the_package_ships_its_type_hints():
    assert (Path(db.__file__).parent / "py.typed").is_file()


# --- the function table ----------------------------------------------------------------------------
FUNCTION_TABLE = DOCS / "function_table.py"
FUNCTION_PAGE = DOCS / "functions.md"


def function_table():
    """What docs/function_table.py prints, run on its own (rules registered by other tests stay out)."""
    result = subprocess.run([sys.executable, str(FUNCTION_TABLE)], capture_output=True, text=True, check=True)
    return result.stdout


def test_the_function_page_holds_the_current_function_table():
    assert function_table().strip() in FUNCTION_PAGE.read_text(), (
        "docs/functions.md's function table is out of date: run python docs/function_table.py --write")


def test_every_builtin_rule_and_nondifferentiable_function_is_in_the_table():
    table = function_table()
    missing = [qualified_name(f) for f in BUILTIN_RULES | BUILTIN_NONDIFFERENTIABLE
               if f"`{qualified_name(f)}`" not in table and f.__module__ != "dualbroadcast.pullbacks"]  # internal
    assert not missing, f"missing from the function table: {missing}"


def test_every_nondifferentiable_function_says_why():
    unexplained = [qualified_name(f) for f in BUILTIN_NONDIFFERENTIABLE
                   if NONDIFFERENTIABLE[f] == "declared nondifferentiable"]
    assert not unexplained, f"give a reason= for {unexplained} in rules/nondifferentiable.py"
