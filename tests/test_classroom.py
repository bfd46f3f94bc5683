"""Classroom assignments (albert_edu.tools.classroom): every chapter's exercises are in nbgrader's format, the student
versions hold no solutions, untouched student versions score zero, and the reference solutions pass every test
(run by nbval in the chapters themselves; nbgrader's full marks checked on chapter 1)."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from albert_edu.tools.manifest import CHAPTERS, load_book
from albert_edu.tools.classroom import (SOLUTION_MARKERS, ClassroomError, assignment_name, assignment_points, autograde,
                                        build, graded_chapters, read_scores)

pytestmark = pytest.mark.classroom


def nbgrader_cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if "nbgrader" in c.get("metadata", {})]


def test_every_chapter_after_the_preface_has_graded_exercises():
    chapters = [c.file for c in load_book().chapters][1:]
    assert graded_chapters() == chapters
    for file in chapters:
        cells = nbgrader_cells(CHAPTERS / file)
        ids = [c["metadata"]["nbgrader"]["grade_id"] for c in cells]
        assert len(ids) == len(set(ids)), f"{file}: duplicate grade_id"
        solutions = [c for c in cells if c["metadata"]["nbgrader"]["solution"]]
        tests = [c for c in cells if c["metadata"]["nbgrader"]["grade"] and c["cell_type"] == "code"]
        assert solutions and tests, file
        graded = [c for c in cells if c["metadata"]["nbgrader"]["grade"]]  # code tests and written answers
        assert len(graded) >= 3, f"{file}: {len(graded)} graded exercises; expected at least three"
        for c in solutions:
            source = "".join(c["source"])
            assert c["cell_type"] == "markdown" or ("### BEGIN SOLUTION" in source and "### END SOLUTION" in source)
        for c in tests:
            assert c["metadata"]["nbgrader"]["points"] > 0 and c["metadata"]["nbgrader"]["locked"]


BLOCK = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)


def hidden_lines(cell: dict) -> set[str]:
    """The lines of a cell that students must not see: inside its solution or hidden-test blocks (or the whole
    of a written-answer cell), minus lines that also stand outside them, such as a function's signature."""
    source = "".join(cell["source"])
    if cell["cell_type"] == "markdown":
        return {line.strip() for line in source.splitlines() if line.strip()}
    inside = {line.strip() for _, block in BLOCK.findall(source) for line in block.splitlines() if line.strip()}
    outside = {line.strip() for line in BLOCK.sub("", source).splitlines()}
    return inside - outside


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, build(root)


def test_student_versions_hold_no_solutions(course):
    root, released = course
    assert sorted(released) == sorted(assignment_name(f) for f in graded_chapters())
    for name, path in released.items():
        student = {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in nbgrader_cells(path)}
        assert not [m for m in SOLUTION_MARKERS if any(m in text for text in student.values())], name
        for cell in nbgrader_cells(root / "source" / name / path.name):
            meta = cell["metadata"]["nbgrader"]
            if not (meta["solution"] or "### BEGIN HIDDEN TESTS" in "".join(cell["source"])):
                continue
            secret = hidden_lines(cell)
            assert secret, f"{name} {meta['grade_id']}: an empty solution or hidden-test block"
            shown = {line.strip() for line in student[meta["grade_id"]].splitlines()}
            assert not secret & shown, f"{name} {meta['grade_id']} shows {sorted(secret & shown)[:3]}"
            if meta["solution"]:
                stub = "YOUR ANSWER HERE" if cell["cell_type"] == "markdown" else "raise NotImplementedError()"
                assert stub in student[meta["grade_id"]], (name, meta["grade_id"])


def test_blank_versions_score_zero_with_every_point_at_stake(course):
    """Every chapter's student version, untouched, scores zero out of all its points: no graded test passes on a
    stub. Grading executes the whole chapter, so this is the slowest test of the suite (15-45 minutes on 2 cores,
    by machine, the first time including chapters 8 and 11's book runs).

    That the reference solutions score full marks needs no second execution of every chapter: the hidden tests sit
    in the chapters themselves, so nbval (pytest chapters/) runs each of them on its reference solution and fails
    on any assert that does not hold, and nbgrader's own scoring of a teacher's version is checked on chapter 1 by
    test_a_bad_submission_scores_zero_with_a_reason_and_a_loop_is_stopped_at_the_time_limit."""
    root, released = course
    names = sorted(released)
    for name in names:
        shutil.copytree(root / "release" / name, root / "submitted" / "blank" / name)
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "autograde", "--course", str(root)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    scores = read_scores(root)
    points = {name: assignment_points(root, name)[0] for name in names}
    for name in names:
        blank = scores[("blank", name)]
        assert points[name] > 0 and blank["max_code"] == points[name], (name, blank)
        assert blank["code"] == 0, (name, blank)
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert rows["blank"][-1] == f"0/{sum(points.values()):g}"


def test_hidden_tests_run_with_the_reference_solutions_under_nbval():
    """What the blank versions' test leaves to nbval: every graded test cell of every chapter, hidden tests
    included, is a plain code cell of the chapter (no nbval marker that would skip it or excuse an exception)."""
    for file in graded_chapters():
        for cell in nbgrader_cells(CHAPTERS / file):
            meta = cell["metadata"]["nbgrader"]
            if meta["grade"] and cell["cell_type"] == "code":
                source = "".join(cell["source"])
                assert not re.search(r"NBVAL_(SKIP|RAISES_EXCEPTION)", source), (file, meta["grade_id"])


def test_errors_are_clear(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "build", "--course", str(tmp_path), "42"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "chapter '42' has no exercises or does not exist" in result.stderr
    with pytest.raises(ClassroomError, match="no submissions in"):
        autograde(tmp_path)


def test_a_bad_submission_scores_zero_with_a_reason_and_a_loop_is_stopped_at_the_time_limit(tmp_path):
    root = tmp_path / "course"
    build(root, ["01"])
    source = root / "source" / "ch01" / "01_parameter_budget.ipynb"
    notebook = json.loads(source.read_text())
    first_code = next(i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "code")
    submissions = {
        "teacher": source.read_text(),
        "garbled": "this is not JSON {",
        "looping": json.dumps({**notebook, "cells": notebook["cells"][:first_code + 1] + [
            {**notebook["cells"][first_code], "id": "loop", "source": "while True:\n    pass\n"}]
            + notebook["cells"][first_code + 1:]}),
    }
    for student, text in submissions.items():
        (root / "submitted" / student / "ch01").mkdir(parents=True)
        (root / "submitted" / student / "ch01" / source.name).write_text(text)
    scores = autograde(root, time_limit_s=20)
    full = scores[("teacher", "ch01")]
    assert full["max_code"] > 0 and full["code"] == full["max_code"] and "error" not in full
    garbled = scores[("garbled", "ch01")]
    assert garbled["code"] == 0 and garbled["max_code"] == full["max_code"]
    assert "01_parameter_budget.ipynb is not a notebook" in garbled["error"]
    assert "error" not in scores[("looping", "ch01")]  # the loop was stopped after 20 s, the rest was graded
    graded = json.loads((root / "autograded" / "looping" / "ch01" / source.name).read_text())
    loop = next(c for c in graded["cells"] if c.get("id") == "loop")
    assert "CellTimeoutError" in [o["ename"] for o in loop["outputs"] if o["output_type"] == "error"]
