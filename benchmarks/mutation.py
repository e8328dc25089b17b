"""Mutation testing of ``dualbroadcast/`` with cosmic-ray: a seeded sample, each mutant against the tests that run it.

Usage, from the repository root (about an hour for 160 mutants on 2 shared cores with ``--jobs 2``)::

    python -m pip install -e '.[mutation]'
    nice -n 19 python -m benchmarks.mutation           # run the sample (resumes an interrupted run)
    python -m benchmarks.mutation --report             # print the last run's report again
    python -m benchmarks.mutation --list               # the sampled mutations, without running them

Options: ``--ref REV`` (default ``HEAD``), ``--seed N``, ``--size N`` and ``--budget SECONDS`` (defaults in
``[tool.cosmic-ray.sample]`` of ``pyproject.toml``), ``--workdir DIR``, ``--fresh``,
``--jobs N`` (mutants run at a time, each worker on its own copy of the tree).

What it measures: cosmic-ray enumerates every mutation its core operators make in
``dualbroadcast/`` (an operator swapped, a comparison changed, a number moved by
one, a ``not`` added, ``and``/``or`` swapped, a loop made empty, a decorator removed,
...), module-level code included (the ``DERIVATIVES`` table, the rules' lambdas).
A full run is ~5 10^4 mutants; this script tests a sample of them:

1. ``git archive REV`` is unpacked into the work directory (default
   ``/tmp/dualbroadcast-mutation``).  cosmic-ray mutates files in place, so it only
   ever touches that copy, never the checkout; ``PYTHONPATH`` points every test
   process (and the notebook kernels they start) at the copy.
2. ``cosmic-ray init`` makes the session (``session.sqlite``).  The sample is drawn
   with ``random.Random(seed)`` from the mutations sorted by (module, operator,
   occurrence), per module in proportion to its number of mutations (at least one
   each): the same ref, seed and size give the same sample.  The mutations outside
   the sample are marked skipped in the session, so ``cr-report session.sqlite``
   shows the sample alone.
3. Each sampled mutation is applied to the copy and ``pytest -x`` runs the test files
   that guard its module (`GUARDS`: the test folders of its layer, the files that
   import the module by name first, smaller files first).  No coverage pass: the
   suite under coverage took longer than a session on a shared 2-core machine, and a
   folder's tests catch what a line's tests catch plus what reaches it indirectly.
   A test that fails is run alone on the unmutated copy; one that fails there too is
   left out from then on (``--deselect``) and the mutant runs again.  A mutant whose
   tests pass the ``budget`` (seconds) is unresolved (``over budget``: a hang or a
   slow folder, judged by hand).  The mutants run in a seeded random order, so a run
   stopped early (a deadline, a busy machine; ``--report`` prints it) has tested a
   sample spread over the whole package.  Hypothesis runs with ``--hypothesis-seed=0``
   and an empty example database, so every mutant sees the same examples.

Outcomes: ``killed`` (a test failed), ``killed (error)`` (the mutant does not import
or collect), ``survived`` (the tests passed), ``over budget`` (unresolved).  The
survivors are listed with their line and diff.  Which of them are *equivalent*
mutations (the behaviour cannot change) is a judgement the script does not make: the
kill rate the project tracks is killed / (sampled - equivalent), with the equivalent
survivors named in the report that quotes it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import difflib
import fnmatch
import io
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "dualbroadcast-mutation.json"
DEFAULTS = {
    "seed": 13,
    "size": 300,
    "budget": 300.0,
    "workdir": "/tmp/dualbroadcast-mutation",
}


# --------------------------------------------------------------------------- configuration


def load_config():
    """``[tool.cosmic-ray]`` of pyproject.toml, with the sample's defaults filled in."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        cfg = tomllib.load(f)["tool"]["cosmic-ray"]
    sample = dict(DEFAULTS)
    sample.update(cfg.get("sample", {}))
    return cfg, sample


def pytest_base(cfg):
    """The test command, as an argument list run by this Python."""
    words = cfg["test-command"].split()
    if words[:3] != ["python", "-m", "pytest"]:
        raise SystemExit("[tool.cosmic-ray] test-command must start with 'python -m pytest'")
    return [sys.executable, "-m", "pytest", *words[3:]]


def test_env(tree):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutated file must never be shadowed by a stale .pyc
    return env


def be_nice():
    with contextlib.suppress(OSError):
        os.nice(max(0, 19 - os.nice(0)))


# --------------------------------------------------------------------------- the copy and the session


def export(commit, tree):
    """Unpack ``git archive commit`` into ``tree`` (over what is there: a run stopped by a signal may have left
    a mutation applied in a copy)."""
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")


def init_session(cfg, tree, session):
    from cosmic_ray.commands import init
    from cosmic_ray.modules import filter_paths, find_modules
    from cosmic_ray.work_db import WorkDB, use_db

    paths = filter_paths(find_modules([Path(cfg["module-path"])]), cfg.get("excluded-modules", []))
    with use_db(str(session), WorkDB.Mode.create) as db:
        init(sorted(paths), db, cfg.get("operators", {}))


def key(item):
    m = item.mutations[0]
    return (str(m.module_path), m.operator_name, m.occurrence)


def draw_sample(items, seed, size):
    """``size`` mutations, per module in proportion to its count (at least one), seeded."""
    by_module = collections.defaultdict(list)
    for item in sorted(items, key=key):
        by_module[key(item)[0]].append(item)
    total = sum(len(v) for v in by_module.values())
    rng = random.Random(seed)
    chosen = []
    for module in sorted(by_module):
        pool = by_module[module]
        n = min(len(pool), max(1, round(size * len(pool) / total)))
        chosen.extend(rng.sample(pool, n))
    return sorted(chosen, key=key)


def apply_sample(session, seed, size):
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.work_items)
        chosen = draw_sample(items, seed, size)
        ids = {i.job_id for i in chosen}
        db.set_multiple_results(
            [i.job_id for i in items if i.job_id not in ids],
            WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not in the sample"),
        )
    return len(items), len(chosen)


# --------------------------------------------------------------------------- which tests guard a module

# Package modules (glob patterns over their paths, first match wins) -> the test folders that guard them,
# closest first: the folders of docs/design.md's layers, not coverage, so a run needs no pass of the whole
# suite first.  Test files that import the module by name run before the folders' other files.
GUARDS = [
    ("dualbroadcast/rules/scipy_special.py", ["tests/rules", "tests/scipy", "tests/modes/test_kink_sweep.py"]),
    ("dualbroadcast/rules/*", ["tests/rules", "tests/modes/test_kink_sweep.py"]),
    ("dualbroadcast/scipy/*", ["tests/scipy", "tests/rules/test_scipy_functions.py",
                               "tests/rules/test_special_oracle.py", "tests/rules/test_lazy_scipy.py",
                               "tests/rules/test_rules.py"]),  # test_rules: the rule sweeps of its functions
    ("dualbroadcast/derivatives.py", ["tests/rules/test_rules.py", "tests/modes/test_kink_sweep.py",
                                      "tests/kernels/test_kernel_rules.py", "tests/rules"]),
    ("dualbroadcast/kernel*", ["tests/kernels", "tests/modes/test_hessian_coefficients.py"]),
    ("dualbroadcast/broadcast*", ["tests/kernels", "tests/modes/test_hessian_coefficients.py",
                                  "tests/modes/test_hvp_forward.py"]),  # kernels on a second tape
    ("dualbroadcast/expr.py", ["tests/kernels"]),
    ("dualbroadcast/operands.py", ["tests/kernels", "tests/tape", "tests/modes/test_forward.py"]),
    ("dualbroadcast/forward.py", ["tests/modes/test_forward.py", "tests/modes/test_forward_fallback.py",
                                  "tests/modes/test_hvp_forward.py", "tests/modes"]),
    ("dualbroadcast/region*", ["tests/prepared"]),
    ("dualbroadcast/replay*", ["tests/prepared"]),
    ("dualbroadcast/loop*", ["tests/prepared"]),
    ("dualbroadcast/chunked.py", ["tests/prepared", "tests/scale_out"]),
    ("dualbroadcast/prepared.py", ["tests/prepared"]),
    ("dualbroadcast/explain.py", ["tests/prepared/test_explain.py", "tests/prepared"]),
    ("dualbroadcast/program.py", ["tests/prepared", "tests/modes"]),
    ("dualbroadcast/demo.py", ["tests/docs", "tests/tooling"]),
    ("dualbroadcast/__main__.py", ["tests/docs", "tests/tooling"]),
    ("dualbroadcast/callers.py", ["tests/scipy/test_messages.py", "tests/tape", "tests/modes"]),
    ("dualbroadcast/__init__.py", ["tests/modes/test_api.py", "tests/docs/test_docs.py"]),
    ("dualbroadcast/lazy.py", ["tests/scale_out/test_dask.py", "tests/tape", "tests/modes"]),
    ("dualbroadcast/api.py", ["tests/tape", "tests/modes", "tests/rules/test_complex.py"]),  # check_gradient
    ("dualbroadcast/*", ["tests/tape", "tests/modes"]),  # facts, hooks, recording, tape, sweeps, reverse, api
]


def test_files_guarding(module, tests_root, closest=False):
    """The test files (paths from the tree's root) that guard ``module``: those naming it first, then its folders';
    ``closest``: those naming it only (its first folder's where none does)."""
    folders = next(f for pattern, f in GUARDS if fnmatch.fnmatch(module, pattern))
    folders = folders[:1] if closest else folders
    files = []
    for entry in folders:
        path = tests_root.parent / entry
        files += [path] if path.is_file() else sorted(path.rglob("test_*.py"), key=_size)  # small files first
    files = list(dict.fromkeys(files))
    dotted = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    parent, _, stem = dotted.rpartition(".")
    naming = re.compile(rf"\b{re.escape(dotted)}\b|from {re.escape(parent)} import [^\n]*\b{stem}\b")
    named = [f for f in sorted(tests_root.rglob("test_*.py")) if naming.search(f.read_text(encoding="utf-8"))
             and parent]  # every test imports the package itself: its __init__ has folders only
    ordered = list(dict.fromkeys(sorted(named, key=_size) + ([] if closest and named else files)))
    return [str(f.relative_to(tests_root.parent)) for f in ordered]


def _size(path):
    return path.stat().st_size


# --------------------------------------------------------------------------- running the mutants


def run_pytest(cfg, tree, args, budget):
    """(exit code, or None past ``budget`` seconds; output) of the test command on ``args`` in the copy ``tree``."""
    shutil.rmtree(tree / ".hypothesis", ignore_errors=True)  # every run sees the same examples
    proc = subprocess.Popen([*pytest_base(cfg), *args], cwd=tree, env=test_env(tree),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=budget)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    return code, out.decode(errors="replace")


def failed_tests(output):
    """The node ids pytest's summary names as failed."""
    return [ln.removeprefix("FAILED ").split(" - ", 1)[0] for ln in output.split("\n") if ln.startswith("FAILED ")]


def run_mutant(cfg, sample, tree, item, broken):
    """(WorkResult, kind, seconds) of one mutation applied to the copy ``tree``, its guarding tests run with -x.

    A test that fails is run again alone on the unmutated copy: one that fails there too joins ``broken``
    (deselected from then on) and the mutant runs again.
    """
    import cosmic_ray.plugins
    from cosmic_ray.mutating import use_mutation
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    m = item.mutations[0]
    tests = test_files_guarding(str(m.module_path), tree / "tests", sample.get("closest", False))
    budget = sample["budget"]
    operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(m.operator_args or {}))
    t = time.time()
    with use_mutation(tree / m.module_path, operator, m.occurrence) as (original, mutated):
        if mutated is None:
            return WorkResult(worker_outcome=WorkerOutcome.NO_TEST, output="no mutation"), "no mutation", 0.0
        diff = _diff(m, original, mutated)
        code, text = run_pytest(cfg, tree, [*tests, *(f"--deselect={b}" for b in sorted(broken))], budget)
    elapsed = time.time() - t
    failed = failed_tests(text)
    if code == 1 and failed and run_pytest(cfg, tree, failed[:1], budget)[0] != 0:
        broken.add(failed[0])
        return run_mutant(cfg, sample, tree, item, broken)
    lines = text.strip().split("\n")
    tail = "\n".join([f"FAILED {f}" for f in failed[:3]] + lines[-15:])
    if code is None:
        kind, outcome = "over budget", TestOutcome.INCOMPETENT  # unresolved: judged by hand
    elif code == 0:
        kind, outcome = "survived closest" if sample.get("closest") else "survived", TestOutcome.SURVIVED
    elif code == 1:
        kind, outcome = "killed", TestOutcome.KILLED
    elif code in (2, 3) or any(ln.startswith("ERROR tests/") for ln in lines):
        # the mutant breaks an import or a test module's collection (with -x, pytest then says "found no
        # collectors" for the test ids after it: exit 4)
        kind, outcome = "killed (error)", TestOutcome.KILLED
    else:  # 4: usage error, 5: nothing collected: the driver's fault, not the tests'
        kind, outcome = "error", TestOutcome.INCOMPETENT
    header = f"{kind}\n{len(tests)} test files, {elapsed:.1f} s, budget {budget:.0f} s, exit {code}\n"
    return WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=outcome, output=header + tail,
                      diff=diff), kind, elapsed


def _diff(m, original, mutated):
    return "\n".join(difflib.unified_diff(original.split("\n"), mutated.split("\n"), f"a/{m.module_path}",
                                          f"b/{m.module_path}", lineterm="", n=0))


def run(cfg, sample, workdir, jobs):
    """Run the session's pending mutants, ``jobs`` at a time, each worker on its own copy of the tree."""
    from cosmic_ray.work_db import WorkDB, use_db

    session = workdir / "session.sqlite"
    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items, key=key)
    random.Random(sample["seed"]).shuffle(pending)  # interrupted, the mutants run are a sample of every module too
    total = len(pending)
    print(f"mutants: {total} to run, {jobs} at a time", flush=True)
    trees = [workdir / "tree"] + [workdir / f"tree{j}" for j in range(1, jobs)]
    for extra in trees[1:]:
        if not extra.exists():
            shutil.copytree(trees[0], extra)
    broken = set(json.loads((workdir / MARKER).read_text()).get("broken", []))
    lock = threading.Lock()
    queue = collections.deque(pending)
    done = []
    t0 = time.time()

    def worker(tree):
        while True:
            with lock:
                if not queue:
                    return
                item = queue.popleft()
            result, kind, elapsed = run_mutant(cfg, sample, tree, item, broken)
            m = item.mutations[0]
            with lock:
                with use_db(str(session), WorkDB.Mode.open) as db:
                    db.set_result(item.job_id, result)
                done.append(kind)
                print(f"[{len(done)}/{total} {time.time() - t0:6.0f} s] {kind:15} {elapsed:5.1f} s"
                      f"  {m.module_path}:{m.start_pos[0]}  {m.operator_name.removeprefix('core/')}", flush=True)

    threads = [threading.Thread(target=worker, args=(tree,)) for tree in trees]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sorted(broken)


# --------------------------------------------------------------------------- report


def report(workdir, state):
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(workdir / "session.sqlite"), WorkDB.Mode.open) as db:
        done = [(i, r) for i, r in db.completed_work_items if r.worker_outcome.value != "skipped"]
    done.sort(key=lambda p: key(p[0]))
    counts = collections.Counter()
    per_module = collections.defaultdict(collections.Counter)
    survivors = []
    for item, result in done:
        kind = (result.output or "").split("\n", 1)[0] if result.worker_outcome.value == "normal" else "no mutation"
        module = str(item.mutations[0].module_path)
        counts[kind] += 1
        per_module[module][kind] += 1
        if kind in ("survived", "survived closest", "over budget"):
            survivors.append((item, result, kind))
    kinds = ["killed", "killed (error)", "survived", "survived closest", "over budget", "error", "no mutation"]
    lines = [(f"# Mutation run: {state['commit'][:12]} seed {state['seed']} sample {state['size']}"
              f" of {state.get('universe', '?')} mutations"), ""]
    if state.get("seconds"):
        lines.append(f"time: {state['seconds'] / 60:.0f} min, budget {state.get('budget', '?')} s a mutant")
    if state.get("broken"):
        lines.append(f"tests failing on the unmutated copy, left out: {', '.join(state['broken'])}")
    lines += ["", "| module | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for module in sorted(per_module):
        lines.append(f"| {module} | " + " | ".join(str(per_module[module][k]) for k in kinds) + " |")
    lines.append("| **total** | " + " | ".join(str(counts[k]) for k in kinds) + " |")
    killed = counts["killed"] + counts["killed (error)"]
    alive = counts["survived"]
    if killed + alive:
        lines += ["", (f"killed {killed} of {killed + alive} run ({100 * killed / (killed + alive):.1f}%), "
                       f"{alive} survivors; kill rate of behaviour-changing mutations = killed / "
                       f"({killed + alive} - equivalent survivors)"
                       + (f"; {counts['survived closest']} survived their closest tests only (unresolved)"
                          if counts["survived closest"] else ""))]
    lines += ["", "## Survivors and mutants over budget", ""]
    for item, result, kind in survivors:
        m = item.mutations[0]
        diff = [d for d in (result.diff or "").split("\n") if d[:1] in "+-" and d[:3] not in ("---", "+++")]
        lines.append(f"- {m.module_path}:{m.start_pos[0]} `{m.operator_name.removeprefix('core/')}`"
                     f" in {m.definition_name} ({kind})")
        lines += [f"      {d}" for d in diff]
    text = "\n".join(lines) + "\n"
    (workdir / "report.md").write_text(text)
    return text


# --------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", default="HEAD")
    p.add_argument("--seed", type=int)
    p.add_argument("--size", type=int)
    p.add_argument("--workdir")
    p.add_argument("--budget", type=float, help="seconds a mutant's tests may take before it is unresolved")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at a time, each on its own copy of the tree")
    p.add_argument("--closest", action="store_true",
                   help="run only the test files naming each mutant's module: a quick first pass, its survivors "
                        "(\"survived closest\") to be run on every guard or judged by hand")
    p.add_argument("--fresh", action="store_true", help="start over even if the work directory holds this run")
    p.add_argument("--list", action="store_true", help="print the sample and stop")
    p.add_argument("--report", action="store_true", help="print the report of the run in the work directory")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    be_nice()
    cfg, sample = load_config()
    sample["closest"] = args.closest
    for name in ("seed", "size", "workdir", "budget"):
        if getattr(args, name) is not None:
            sample[name] = getattr(args, name)
    workdir = Path(sample["workdir"]).resolve()
    if args.report:
        print(report(workdir, json.loads((workdir / MARKER).read_text())))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--verify", args.ref + "^{commit}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    want = {"commit": commit, "seed": sample["seed"], "size": sample["size"], "config": cfg}
    state = json.loads((workdir / MARKER).read_text()) if (workdir / MARKER).exists() else None
    same = state is not None and all(state.get(k) == v for k, v in want.items())
    if workdir.exists() and (args.fresh or not same):
        if state is None and any(workdir.iterdir()):
            raise SystemExit(f"{workdir} exists and is not a mutation work directory: choose another --workdir")
        shutil.rmtree(workdir)
    t0 = time.time()
    if not same or args.fresh:
        workdir.mkdir(parents=True)
        state = dict(want)
        (workdir / MARKER).write_text(json.dumps(state))
        export(commit, workdir / "tree")
        os.chdir(workdir / "tree")
        print(f"cosmic-ray init: {commit[:12]} {cfg['module-path']}", flush=True)
        init_session(cfg, workdir / "tree", workdir / "session.sqlite")
        state["universe"], _ = apply_sample(workdir / "session.sqlite", sample["seed"], sample["size"])
        (workdir / MARKER).write_text(json.dumps(state))
    else:
        for tree in workdir.glob("tree*"):
            export(commit, tree)
    os.chdir(workdir / "tree")
    if args.list:
        from cosmic_ray.work_db import WorkDB, use_db

        with use_db(str(workdir / "session.sqlite"), WorkDB.Mode.open) as db:
            sampled = [i for i, r in db.completed_work_items if r.worker_outcome.value != "skipped"]
            sampled += list(db.pending_work_items)
        for item in sorted(sampled, key=key):
            m = item.mutations[0]
            print(f"{m.module_path}:{m.start_pos[0]}:{m.start_pos[1]} {m.operator_name} #{m.occurrence}")
        print(f"{len(sampled)} of {state['universe']} mutations")
        return 0
    state["budget"] = sample["budget"]
    state["broken"] = run(cfg, sample, workdir, args.jobs)
    state["seconds"] = state.get("seconds", 0) + time.time() - t0
    (workdir / MARKER).write_text(json.dumps(state))
    print(report(workdir, state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
