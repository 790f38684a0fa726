"""The release's MinHash index in a child process gives the in-process index's pairs exactly, and a
failing or killed child reaches the caller as a clear error, never as a hang or a lost row. The child
never runs the caller's main script again (a script without a ``__main__`` guard works)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dynaval.adapters.health.minhash_process import IndexProcessFailed, MinHashProcess
from dynaval.domain.health.minhash import MinHashIndex
from dynaval.domain.health.near_duplicates import NearDuplicateRule

NLI = ["premise", "hypothesis"]
WORDS = [
    "the", "a", "movie", "film", "was", "not", "bad", "good", "great", "plot", "actors", "cast",
    "and", "in", "every", "scene", "café", "naïve",
]  # fmt: skip


def rows(count: int, seed: int = 7) -> list[tuple[str, dict[str, str]]]:
    """NLI-shaped rows, a third of them a one-word edit of an earlier row (near-duplicates)."""
    rng = random.Random(seed)
    made: list[tuple[str, dict[str, str]]] = []
    for i in range(count):
        if made and i % 3 == 0:
            _key, earlier = rng.choice(made)
            words = earlier["hypothesis"].split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            inputs = {"premise": earlier["premise"], "hypothesis": " ".join(words)}
        else:
            inputs = {
                "premise": " ".join(rng.choice(WORDS) for _ in range(14)),
                "hypothesis": " ".join(rng.choice(WORDS) for _ in range(12)),
            }
        made.append((f"ex-{i:05d}", inputs))
    made.append(("ex-empty", {"premise": "", "hypothesis": ""}))  # no words: never a candidate
    return made


def in_process_pairs(
    examples: list[tuple[str, dict[str, str]]], rule: NearDuplicateRule
) -> list[tuple[str, str, float]]:
    index = MinHashIndex(rule)
    for key, inputs in examples:
        index.add_inputs(key, inputs, NLI)
    return list(index.pairs())


def gone(pid: int | None) -> bool:
    """Whether the process has ended and been waited for."""
    assert pid is not None
    return not Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("start_after", [50, 10_000], ids=["child process", "in process"])
def test_the_pairs_are_the_in_process_index_pairs(start_after: int) -> None:
    rule = NearDuplicateRule(threshold=0.6)
    examples = rows(4_321)
    expected = in_process_pairs(examples, rule)
    assert len(expected) > 100
    index = MinHashProcess(rule, start_after=start_after)
    for key, inputs in examples:
        index.add_inputs(key, inputs, NLI)
    pid = index.pid
    assert (pid is not None) is (start_after < len(examples))
    assert index.pairs() == expected
    assert index.pairs() == expected  # asked again: the same list, no second search
    if pid is not None:
        assert index.peak_rss_mb is not None and index.peak_rss_mb > 0
    with pytest.raises(RuntimeError, match="takes no more rows"):
        index.add_inputs("late", {"premise": "a", "hypothesis": "b"}, NLI)
    index.close()
    assert pid is None or gone(pid)
    with pytest.raises(RuntimeError, match="closed"):
        index.pairs()


@pytest.mark.parametrize("start_after", [50, 10_000], ids=["child process", "in process"])
def test_pairs_asked_for_ahead_are_the_same_and_no_row_comes_after(start_after: int) -> None:
    """A build asks for the pairs, does other work while the child finds them, then reads them."""
    rule = NearDuplicateRule(threshold=0.6)
    examples = rows(3_000, seed=11)
    index = MinHashProcess(rule, start_after=start_after)
    try:
        for key, inputs in examples:
            index.add_inputs(key, inputs, NLI)
        index.ask()
        index.ask()  # twice is harmless
        with pytest.raises(RuntimeError, match="takes no more rows"):
            index.add_inputs("late", {"premise": "a", "hypothesis": "b"}, NLI)
        assert index.pairs() == in_process_pairs(examples, rule)
    finally:
        index.close()


def test_closing_after_asking_ends_the_child() -> None:
    """A build that fails while the child finds its pairs closes the index: the child goes too."""
    index = MinHashProcess(start_after=10)
    for key, inputs in rows(5_000):
        index.add_inputs(key, inputs, NLI)
    pid = index.pid
    index.ask()
    index.close()
    assert gone(pid)


def test_a_failure_in_the_child_is_raised_in_the_caller() -> None:
    index = MinHashProcess(start_after=10)
    try:
        for key, inputs in rows(30):
            index.add_inputs(key, inputs, NLI)
        index.add_inputs("ex-bad", {"premise": "a", "hypothesis": "b"}, NLI, side=200)  # the index refuses it
        with pytest.raises(IndexProcessFailed, match="a side is 0 to 127, not 200"):
            index.pairs()
    finally:
        pid = index.pid
        index.close()
    assert gone(pid)


@pytest.mark.parametrize("start_after", [10, 10_000], ids=["child process", "in process"])
def test_a_key_added_again_is_named_and_no_pairs_are_given(start_after: int) -> None:
    """The child knows the rows by number: the caller finds a repeated key, as the index would."""
    index = MinHashProcess(start_after=start_after)
    try:
        for key, inputs in rows(30):
            index.add_inputs(key, inputs, NLI)
        index.add_inputs("ex-00003", {"premise": "again", "hypothesis": "again"}, NLI)
        index.add_inputs("ex-00001", {"premise": "and", "hypothesis": "again"}, NLI)
        with pytest.raises(ValueError, match=r"^ex-00003 is in the index already$"):
            index.ask()
        with pytest.raises(ValueError, match=r"^ex-00003 is in the index already$"):
            index.pairs()
    finally:
        index.close()


def test_keys_whose_hashes_are_equal_are_not_taken_for_one_key() -> None:
    """The repeated-key check compares the hashes first; two keys of one hash are still two keys."""

    class SameHash(str):
        __slots__ = ()

        def __hash__(self) -> int:
            return 42

    rule = NearDuplicateRule(threshold=0.6)
    examples = rows(60, seed=3)
    index = MinHashProcess(rule, start_after=20)
    try:
        for key, inputs in examples:
            index.add_inputs(SameHash(key), inputs, NLI)
        assert index.pairs() == in_process_pairs(examples, rule)
    finally:
        index.close()


def test_a_killed_child_is_named_not_waited_for() -> None:
    index = MinHashProcess(start_after=10)
    try:
        for key, inputs in rows(30):
            index.add_inputs(key, inputs, NLI)
        assert index.pid is not None
        os.kill(index.pid, signal.SIGKILL)
        with pytest.raises(IndexProcessFailed, match=r"ended without answering \(exit code -9\)"):
            index.pairs()
    finally:
        index.close()


def test_closing_before_the_pairs_ends_the_child() -> None:
    """A build that fails while reading closes its index: the child does not outlive it."""
    index = MinHashProcess(start_after=10)
    for key, inputs in rows(5_000):
        index.add_inputs(key, inputs, NLI)
    pid = index.pid
    assert pid is not None and not gone(pid)
    index.close()
    index.close()  # twice is harmless
    assert gone(pid)


def test_a_caller_script_without_a_main_guard_is_not_run_again(tmp_path: Path) -> None:
    """A ``multiprocessing`` child would import the caller's script again and run its top level."""
    script = tmp_path / "no_guard.py"
    script.write_text(
        textwrap.dedent(
            """
            from dynaval.adapters.health.minhash_process import MinHashProcess
            print("top level ran")
            index = MinHashProcess(start_after=1)
            for i in range(50):
                text = "alpha beta gamma delta epsilon" if i % 2 else "one two three four five six"
                index.add_inputs(f"k{i:02d}", {"text": text}, ["text"])
            assert index.pid is not None
            print(len(index.pairs()))
            index.close()
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["top level ran", str(2 * 25 * 24 // 2)]


def test_the_fields_stay_the_same() -> None:
    index = MinHashProcess()
    index.add_inputs("a", {"text": "one two three"}, ["text"])
    with pytest.raises(ValueError, match="same fields"):
        index.add_inputs("b", {"premise": "x", "hypothesis": "y"}, NLI)
    index.close()


@pytest.mark.parametrize("start_after", [50, 10_000], ids=["child process", "in process"])
def test_rows_of_one_side_are_not_paired_and_the_rest_are_as_before(start_after: int) -> None:
    """``release verify`` gives each row its kind of split as its side: the pairs are every pair
    across sides, in the same order, and none within one."""
    rule = NearDuplicateRule(threshold=0.6)
    examples = rows(3_000, seed=5)
    sides = {key: random.Random(key).choice([0, 0, 0, 1, 2]) for key, _inputs in examples}
    expected = [p for p in in_process_pairs(examples, rule) if sides[p[0]] != sides[p[1]]]
    assert len(expected) > 50
    in_process = MinHashIndex(rule)
    index = MinHashProcess(rule, start_after=start_after)
    try:
        for key, inputs in examples:
            in_process.add_inputs(key, inputs, NLI, sides[key])
            index.add_inputs(key, inputs, NLI, sides[key])
        assert list(in_process.pairs()) == expected
        assert index.pairs() == expected
    finally:
        index.close()
    with pytest.raises(ValueError, match="a side is 0 to 127"):
        MinHashIndex(rule).add_inputs("k", {"premise": "a", "hypothesis": "b"}, NLI, side=200)


def test_the_child_needs_neither_datasketch_nor_scipy() -> None:
    """What the child runs (its module, an index by row, its pairs) imports neither: they are
    54 MB and 0.4 s of a process whose memory is most of a large release's verify."""
    probe = textwrap.dedent(
        """
        import sys
        from dynaval.adapters.health import minhash_process
        from dynaval.domain.health.near_duplicates import NearDuplicateRule
        rows = [(("one two three four five six",), None), (("one two three four five seven",), None)]
        print(minhash_process._pairs_of(NearDuplicateRule(threshold=0.5), ["text"], rows))
        print(sorted({name.split(".")[0] for name in sys.modules} & {"datasketch", "scipy"}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[(0, 1, 0.6667)]", "[]"]
