"""Compacted segments of a Parquet output, on the file side alone (no Spark).

A stand-in compactor commits segments through the same ``Segments`` calls the
``ParquetCompactor`` makes, with a stand-in data file; what is checked is what readers
and the protocol's other steps (publish, recover) see at every step.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from recipes.pipeline import _files, _segments
from recipes.pipeline._output import PipelineOutput, PipelineOutputError
from recipes.pipeline._segments import Segment

from .test_output import fake_stage


def publish(output: PipelineOutput, *ranges: tuple[int, int], partition: int = 0) -> list[str]:
    names = []
    for start, end in ranges:
        staged = fake_stage(output, "t", partition, start, end)
        names.append(output.publish(staged).name)
    return names


def compact(
    output: PipelineOutput,
    batches: list[str],
    merged: Sequence[Segment] = (),
) -> Segment | None:
    """What a ParquetCompactor's cycle commits, with a stand-in data file."""
    held: dict[str, Mapping[str, Any]] = {
        name: output.read_manifest(output.published_dir / name) for name in batches
    }
    for segment in merged:
        held.update(segment.batches)
    with output.segments.new_segment() as target:
        target.mkdir()
        (target / "part-00000.parquet").write_bytes(b"PAR1 compacted stand-in")
        return output.segments.commit(
            target, batches=held, replaces=list(merged), rows=len(held), audit={"compactor": "x"}
        )


def read_once(output: PipelineOutput) -> list[str]:
    """The batches a reader sees: every published range, each as often as it is listed."""
    return [r.name for r in output.published()]


def test_a_segment_stands_for_the_batches_it_holds(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20), (20, 30))
    segment = compact(output, names[:2])
    assert segment is not None
    assert read_once(output) == names  # the same batches, each once
    assert output.check_published({("t", 0): (0, 30)}) == {("t", 0): (0, 30)}
    files = output.published_files()
    assert files[0] == segment.path / "part-00000.parquet"
    assert all(names[2] in str(f) for f in files[1:]) and files[1:]
    assert [p.name for p in output.published_paths()] == [names[2]]


def test_what_a_segment_holds_is_deleted_only_after_the_retention(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20))
    segment = compact(output, names)
    assert segment is not None
    assert output.segments.retire(60.0) == []  # a reader may still read them
    assert all((output.published_dir / n).is_dir() for n in names)
    assert sorted(output.segments.retire(60.0, now=segment.committed_s + 60)) == names
    assert not any((output.published_dir / n).exists() for n in names)
    assert read_once(output) == names


def test_a_batch_another_compactor_committed_first_is_never_held_twice(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20), (20, 30))
    assert compact(output, names[:2]) is not None
    # A second compactor listed the same batches before the first committed.
    assert compact(output, names[1:]) is None
    assert read_once(output) == names
    assert not list(output.segments.compacting_dir.iterdir())  # its copy is gone


def test_a_segment_already_replaced_cannot_be_merged_again(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20), (20, 30), (30, 40))
    first = compact(output, names[:2])
    assert first is not None
    assert compact(output, names[2:3], [first]) is not None
    assert compact(output, names[3:], [first]) is None  # it read `first` as live
    assert read_once(output) == names


def test_deleting_a_middle_generation_never_brings_an_older_one_back(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20), (20, 30), (30, 40))
    s1 = compact(output, names[:1])
    assert s1 is not None
    s2 = compact(output, names[1:2], [s1])
    assert s2 is not None
    s3 = compact(output, names[2:3], [s2])
    assert s3 is not None
    assert set(s3.replaces) == {s1.name, s2.name}
    # Each generation deleted on its own schedule, in the worst order: s2 first.
    output.segments._trash(s2.path)
    assert read_once(output) == names
    output.segments.retire(0.0)
    assert [s.name for s in output.segments.view().segments] == [s3.name]
    assert read_once(output) == names


def test_a_late_publish_of_a_compacted_batch_is_dropped(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    staged = fake_stage(output, "t", 0, 0, 10)
    # A former owner staged and committed the batch, the new owner published it
    # (recover), it was compacted and its directory deleted ...
    copy = tmp_path / "copy"
    shutil.copytree(output.staging_dir / staged.name, copy)
    name = output.publish(staged).name
    second = publish(output, (10, 20))
    segment = compact(output, [name, *second])
    assert segment is not None
    output.segments.retire(0.0)
    assert not (output.published_dir / name).exists()
    # ... then the former owner resumes and publishes its staging copy: the directory is
    # back, but a segment holds its batch, so readers do not read it and the next clean-up
    # deletes it.
    shutil.copytree(copy, output.staging_dir / staged.name)
    output.publish(staged.name)
    assert (output.published_dir / name).is_dir()
    assert read_once(output) == [name, *second]
    assert output.published_files() == [segment.path / "part-00000.parquet"]
    output.segments.retire(0.0)
    assert not (output.published_dir / name).exists()
    assert read_once(output) == [name, *second]


def test_recover_finds_a_committed_batch_in_its_segment(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    staged = fake_stage(output, "t", 0, 0, 10)
    name = output.publish(staged).name
    segment = compact(output, [name, *publish(output, (10, 20))])
    assert segment is not None
    output.segments.retire(0.0)
    # The last commit of the partition still names the first batch's staging directory.
    assert output.recover("t", 0, 10, staged.name) == segment.path


def test_a_crashed_compactors_copy_is_never_read_and_is_removed(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20))
    with output.segments.new_segment() as writing:
        writing.mkdir()
        (writing / "part-00000.parquet").write_bytes(b"half a segment")
        output.segments.retire(0.0)
        assert writing.exists()  # its compactor still writes it
        # The compactor dies here: its lock goes with it, its directory stays.
        left = output.segments.compacting_dir / "segment-000000000000001-000000000000"
        shutil.copytree(writing, left)
    assert read_once(output) == names
    assert left not in {p.parent for p in output.published_files()}
    output.segments.retire(60.0)
    assert not left.exists()
    assert list(output.segments.compacting_dir.iterdir()) == []


def test_readers_see_every_batch_once_while_compactors_commit_and_delete(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, *[(i * 10, i * 10 + 10) for i in range(40)])
    stop = threading.Event()
    problems: list[str] = []

    def compactor() -> None:
        # Merges two batches, or the two smallest segments, then deletes at once.
        while not stop.is_set():
            view = output.segments.view()
            fresh = output._own_dirs(view)
            merged = sorted(view.segments, key=lambda s: s.rows)[:2] if len(fresh) < 2 else []
            if len(fresh) + len(merged) < 2:
                return
            try:
                compact(output, fresh[:2], merged)
            except PipelineOutputError:
                # The other compactor committed and deleted (retention 0) a batch this
                # one had listed: the cycle fails and is tried again, as
                # ParquetCompactor.run does.
                continue
            output.segments.retire(0.0)

    def reader() -> None:
        while not stop.is_set():
            seen = read_once(output)
            if seen != names:
                problems.append(f"{len(seen)} batches seen, {len(set(seen))} distinct")

    threads = [threading.Thread(target=compactor) for _ in range(2)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    threads[0].join(60)
    threads[1].join(60)
    stop.set()
    for t in threads:
        t.join(10)
    assert problems == []
    assert read_once(output) == names
    assert len(output.segments.view().segments) == 1


def test_a_reader_listing_across_a_commit_and_its_deletions_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20), (20, 30))
    listdir = _files.listdir
    interleaved: list[Segment | None] = []

    def listing(path: Path) -> list[str]:
        # Between the reader's listing of the segments and of the published batches, a
        # compactor commits a segment and deletes what it holds (no retention).
        if path == output.published_dir and not interleaved:
            monkeypatch.setattr(_segments, "listdir", listdir)
            interleaved.append(compact(output, names[:2]))
            output.segments.retire(0.0)
        return listdir(path)

    monkeypatch.setattr(_segments, "listdir", listing)
    assert read_once(output) == names
    assert interleaved and interleaved[0] is not None


def test_an_entry_of_compacted_that_is_no_segment_is_not_read(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20))
    (output.segments.compacted_dir / "lost+found").mkdir(parents=True)
    (output.segments.compacted_dir / "notes.txt").write_text("an operator's")
    segment = compact(output, names)
    assert segment is not None
    assert [s.name for s in output.segments.view().segments] == [segment.name]
    assert read_once(output) == names
    assert [r.name for r in output.published()] == names


def test_an_unreadable_segment_manifest_is_an_error_naming_it(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    names = publish(output, (0, 10), (10, 20))
    segment = compact(output, names)
    assert segment is not None
    (segment.path / _segments.SEGMENT_MANIFEST).write_text('{"batches": ')
    with pytest.raises(PipelineOutputError, match=f"{segment.name}.*_segment.json"):
        output.published()


def test_a_dead_compactors_lock_file_is_removed_with_its_copy(tmp_path: Path) -> None:
    output = PipelineOutput(tmp_path)
    with output.segments.new_segment() as writing:
        lock = writing.parent / f"{writing.name}.lock"
        shutil.copy(lock, writing.parent / "segment-000000000000001-000000000000.lock")
    output.segments.retire(0.0)
    assert list(output.segments.compacting_dir.iterdir()) == []
