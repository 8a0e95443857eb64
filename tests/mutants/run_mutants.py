#!/usr/bin/env python3
"""Plants known bugs in a copy of the tree, one at a time, and checks that the tests fail.

Each mutant in mutants.json is a bug a kernel or CPU step could plausibly have (an off-by-one
at a tile boundary, a missing barrier or wait, a forgotten rescale, a wrong alignment rule) and
names the chapter whose tests must catch it. For each, the script edits a copy of the sources,
rebuilds that chapter's test binaries and runs its suites (sim, cpu, race, memcheck, profile,
or the mutant's own `stages`) until one fails: the mutant is killed. One that every suite
passes survived: a test that could not fail, or a shape that misses the boundary. A mutant of
the simulator itself (chapter "sim") names its `targets` and a `ctest` regex instead: the
planted faults, races and counts of the simulator's own tests must notice (the same run passes
without the mutant first, so that a binary left out of `targets`, "Not Run", cannot pass for
the kill). The copy lives in BUILD_DIR (default build-mutants/), so the working tree is never touched.

  tests/mutants/run_mutants.py                 every mutant (about 50 minutes on 2 cores)
  tests/mutants/run_mutants.py NAME ...        those mutants
  tests/mutants/run_mutants.py --check         only that every edit still applies (seconds;
                                               CTest runs this as mutants/apply)
  tests/mutants/run_mutants.py --list          the mutants and what each plants

Exit status 1 when a mutant survived, did not compile, or no longer applies.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
STAGES = {  # stage -> (test binary suffix, doctest suite)
    "sim": ("", "sim"),
    "cpu": ("", "cpu"),
    "race": ("_race", "sim"),
    "memcheck": ("_instrumented", "sim"),
    "profile": ("_instrumented", "profile"),
}
DEFAULT_STAGES = ["sim", "cpu", "race", "memcheck", "profile"]


def load(path):
    mutants = json.loads(path.read_text())
    for m in mutants:
        for key in ("name", "chapter", "plants", "edits"):
            if key not in m:
                sys.exit(f"run_mutants: mutant {m.get('name', '?')} has no '{key}'")
        if m["chapter"] == "sim" and not ("targets" in m and "ctest" in m):
            sys.exit(f"run_mutants: mutant {m['name']} of the simulator needs targets and ctest")
        for stage in m.get("stages", []):
            if stage not in STAGES:
                sys.exit(f"run_mutants: mutant {m['name']}: unknown stage '{stage}'")
    return mutants


def chapter_dir(root, chapter):
    if chapter == "sim":
        return "sim"
    found = sorted((root / "chapters").glob(chapter + "_*"))
    if len(found) != 1:
        raise ValueError(f"no single chapter {chapter} under {root / 'chapters'}")
    return found[0].name


def mutated(root, mutant):
    """The mutant's files as (original, mutated) texts, computed in memory; raises ValueError
    when an edit's text does not occur exactly once."""
    texts = {}
    for file, old, new in mutant["edits"]:
        if file not in texts and not (root / file).is_file():
            raise ValueError(f"{file}: no such file")
        original, text = texts.get(file) or ((root / file).read_text(),) * 2
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{file}: the text to replace occurs {count} times, not once")
        texts[file] = (original, text.replace(old, new))
    return texts


def check_applies(mutants):
    bad = 0
    for m in mutants:
        try:
            chapter_dir(ROOT, m["chapter"])
            mutated(ROOT, m)
        except ValueError as e:
            print(f"{m['name']}: {e}")
            bad += 1
    print(f"{len(mutants) - bad} of {len(mutants)} mutants apply")
    return bad == 0


def run(cmd, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"


def run_chapter_mutant(m, chapter, build, jobs):
    """Builds the chapter's test binaries and runs the mutant's stages until one fails:
    (verdict, detail)."""
    for stage in m.get("stages", DEFAULT_STAGES):
        suffix, suite = STAGES[stage]
        target = f"test_{chapter}{suffix}"
        rc, out = run(["cmake", "--build", str(build), "--target", target, "-j", jobs], 3600)
        if rc != 0:
            return "DOES NOT COMPILE", out[-1500:]
        exe = build / "chapters" / chapter / target
        rc, out = run([str(exe), f"--test-suite={suite}", "--abort-after=1"], 1800)
        if rc != 0:
            caught = [l.strip() for l in out.splitlines()
                      if "ERROR" in l or "error" in l or "ThreadSanitizer" in l]
            return f"killed by {stage}", "\n".join(caught)
    return "SURVIVED", ""


def run_simulator_mutant(m, build, jobs):
    """Builds the mutant's targets and runs `ctest -R` on its regex: (verdict, detail)."""
    rc, out = run(["cmake", "--build", str(build), "--target", *m["targets"], "-j", jobs], 3600)
    if rc != 0:
        return "DOES NOT COMPILE", out[-1500:]
    rc, out = run(["ctest", "--test-dir", str(build), "-R", m["ctest"]], 1800)
    if rc != 0:
        failed = [l.strip() for l in out.splitlines() if "(Failed)" in l or "***" in l]
        return "killed by ctest", "\n".join(failed)
    return "SURVIVED", ""


def check_simulator_baseline(chosen, build, jobs):
    """The ctest run of every simulator mutant passes on the tree as it is: a test that fails
    for another reason (one of its binaries not among the mutant's targets, so "Not Run") would
    otherwise count as the kill. Exits with the reason when one does not."""
    runs = {(tuple(m["targets"]), m["ctest"]) for m in chosen if m["chapter"] == "sim"}
    for targets, regex in sorted(runs):
        rc, out = run(["cmake", "--build", str(build), "--target", *targets, "-j", jobs], 3600)
        if rc == 0:
            rc, out = run(["ctest", "--test-dir", str(build), "-R", regex], 1800)
        if rc != 0:
            failed = [l.strip() for l in out.splitlines() if "(Failed)" in l or "Not Run" in l]
            sys.exit(f"run_mutants: without any mutant, targets {' '.join(targets)} and ctest "
                     f"-R '{regex}' already fail, so no simulator mutant could be judged:\n"
                     + "\n".join(failed or out.splitlines()[-20:]))


def copy_tree(dest):
    """The tracked and untracked (not ignored) files of the working tree, copied to dest."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for f in filter(None, files):
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="mutants to run (default: all)")
    ap.add_argument("--check", action="store_true", help="only check that every edit applies")
    ap.add_argument("--list", action="store_true", help="list the mutants")
    ap.add_argument("--build-dir", default=str(ROOT / "build-mutants"))
    ap.add_argument("--jobs", default="2")
    args = ap.parse_args()
    mutants = load(HERE / "mutants.json")
    if args.list:
        for m in mutants:
            print(f"{m['name']:24} ch{m['chapter']}  {m['plants']}")
        return 0
    if args.check:
        return 0 if check_applies(mutants) else 1
    unknown = set(args.names) - {m["name"] for m in mutants}
    if unknown:
        sys.exit(f"run_mutants: no mutant named {', '.join(sorted(unknown))} (--list shows them)")
    chosen = [m for m in mutants if not args.names or m["name"] in args.names]

    work = pathlib.Path(args.build_dir)
    src, build = work / "src", work / "build"
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    copy_tree(src)
    rc, out = run(["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
                   "-DWB_ENABLE_CUDA=OFF", "-DWB_BUILD_DOCS=OFF"], 600)
    if rc != 0:
        sys.exit(f"run_mutants: cmake configure failed:\n{out[-2000:]}")

    check_simulator_baseline(chosen, build, args.jobs)
    failed = 0
    for m in chosen:
        start = time.time()
        chapter = chapter_dir(src, m["chapter"])
        try:
            texts = mutated(src, m)
        except ValueError as e:
            print(f"{m['name']}: NO LONGER APPLIES ({e})", flush=True)
            failed += 1
            continue
        for f, (_, text) in texts.items():
            (src / f).write_text(text)
        try:
            if m["chapter"] == "sim":
                verdict, detail = run_simulator_mutant(m, build, args.jobs)
            else:
                verdict, detail = run_chapter_mutant(m, chapter, build, args.jobs)
        finally:
            for f, (original, _) in texts.items():
                (src / f).write_text(original)
        if not verdict.startswith("killed"):
            failed += 1
        print(f"{m['name']}: {verdict} ({time.time() - start:.0f} s): {m['plants']}", flush=True)
        if detail:  # what caught it (its first lines), or why it was not caught
            lines = detail.splitlines()
            shown = lines[:2] if verdict.startswith("killed") else lines
            print("  " + "\n  ".join(shown), flush=True)
    print(f"{len(chosen) - failed} of {len(chosen)} mutants killed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
