"""Classroom assignments (albert_edu.tools.classroom): every chapter's exercises are in nbgrader's format, the student
versions hold no solutions and keep every graded cell and point where nbgrader grades them, an untouched student
version would score zero (read from the code for every chapter; graded by nbgrader on chapter 1), and the reference
solutions pass every test (run by nbval in the chapters themselves; nbgrader's full marks checked on chapter 1).

Grading every chapter with nbgrader would execute the whole book a second time (35 minutes on a slow 2-core
machine); chapter 1 exercises the grading itself, and the reading of the code carries the rest."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from albert_edu.tools.manifest import CHAPTERS, load_book
from albert_edu.tools.classroom import (SOLUTION_MARKERS, ClassroomError, assignment_name, assignment_points, autograde,
                                        build, free_tests, graded_chapters, print_scores, read_scores)

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


def graded_tests_of(path) -> list[str]:
    """The grade ids of a notebook's graded code tests."""
    return [c["metadata"]["nbgrader"]["grade_id"] for c in nbgrader_cells(path)
            if c["metadata"]["nbgrader"]["grade"] and c["cell_type"] == "code"]


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


def test_every_student_version_keeps_its_graded_cells_and_points_where_nbgrader_expects_them(course):
    """nbgrader grades a submission by the cells its gradebook recorded when it generated the student version: for
    every chapter, those are the chapter's graded cells with their points, and the student version holds each of them,
    in the chapter's order, with the same grading metadata (hidden tests are put back from the source)."""
    from nbgrader.api import Gradebook

    root, released = course
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        for name, path in released.items():
            source = nbgrader_cells(root / "source" / name / path.name)
            graded = {c["metadata"]["nbgrader"]["grade_id"]: (c["metadata"]["nbgrader"]["points"], c["cell_type"])
                      for c in source if c["metadata"]["nbgrader"]["grade"]}
            notebook = gradebook.find_notebook(path.stem, name)
            assert {g.name: (g.max_score, g.cell_type) for g in notebook.grade_cells} == graded, name
            keys = ("grade_id", "grade", "solution", "locked", "points")
            assert [{k: c["metadata"]["nbgrader"].get(k) for k in keys} for c in nbgrader_cells(path)] == \
                [{k: c["metadata"]["nbgrader"].get(k) for k in keys} for c in source], name


def test_no_graded_test_passes_in_an_unanswered_student_version(course):
    """Every chapter's untouched student version would score zero: each graded test uses something an unanswered
    exercise leaves undefined or raising (read from the code; the reading is checked against nbgrader's grading of
    chapter 1 below), while on the reference solutions the same reading finds every test runnable."""
    root, released = course
    for name, path in released.items():
        source = root / "source" / name / path.name
        assert free_tests(path, source) == [], name
        assert free_tests(source, source) == graded_tests_of(source), name


@pytest.mark.slow
def test_every_untouched_student_version_scores_zero_when_nbgrader_grades_it(course):
    """The reading above, confirmed by nbgrader on every chapter: grading executes the whole book again (15-45 minutes
    on 2 cores, by machine), so `make test-all` runs it and `make test` grades chapter 1 only."""
    root, released = course
    for name in released:
        shutil.copytree(root / "release" / name, root / "submitted" / "blank" / name)
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "autograde", "--course", str(root)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    scores = read_scores(root)
    for name in released:
        blank = scores[("blank", name)]
        assert blank["code"] == 0 and blank["max_code"] == assignment_points(root, name)[0] > 0, (name, blank)


def exercise_notebook(solution: str, test_source: str) -> dict:
    cell = lambda source, **grading: {"cell_type": "code", "metadata": {"nbgrader": {
        "grade": False, "solution": False, "locked": False, **grading}} if grading else {}, "source": source,
        "outputs": [], "execution_count": None}
    return {"cells": [cell("import math\nlimit = 3\n"), cell(solution, grade_id="s", solution=True),
                      cell(test_source, grade_id="t", grade=True, locked=True, points=1)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


ANSWERED = ("def area(r):\n    ### BEGIN SOLUTION\n    return math.pi * r * r\n    ### END SOLUTION\n\n\n"
            "### BEGIN SOLUTION\nunit = area(1)\n### END SOLUTION\nbig = area(limit)\n")
UNANSWERED = ("def area(r):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\n\n"  # as nbgrader writes it
              "# YOUR CODE HERE\nraise NotImplementedError()\nbig = area(limit)\n")


@pytest.mark.parametrize("test_source, fails", [
    ("assert unit > 3", True),             # bound inside the solution block: absent from the student version
    ("assert big > 28", True),             # bound after the stub that stops the cell
    ("assert area(2) > 12", True),         # a function whose body is the stub
    ("assert limit == 3", False),          # needs no answer: free points
    ("assert math.pi > 3", False),
])
def test_the_reading_of_an_unanswered_notebook_tells_a_test_that_needs_the_answer(tmp_path, test_source, fails):
    source, student = tmp_path / "source.ipynb", tmp_path / "student.ipynb"
    source.write_text(json.dumps(exercise_notebook(ANSWERED, test_source)))
    student.write_text(json.dumps(exercise_notebook(UNANSWERED, test_source)))
    assert free_tests(student, source) == ([] if fails else ["t"])
    assert free_tests(source, source) == ["t"]


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
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "autograde", "--course", str(tmp_path),
                             "--memory-limit", "-1"], capture_output=True, text=True)
    assert result.returncode == 1 and "--memory-limit -1: expected a number of MiB, or 0 for no limit" in result.stderr


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        return "Z" not in next(line for line in open(f"/proc/{pid}/status") if line.startswith("State:"))
    except FileNotFoundError:
        return False


def _tree(root) -> dict:
    """Every file under root with its bytes: what a hostile submission must leave as it was."""
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def hostile_cells(pid_file) -> list[str]:
    """A submission's worst: it deletes everything under the directories above its notebook (in a course graded in
    place: the other submissions, the source with its hidden tests, the gradebook), starts a process meant to outlive
    it, allocates memory past the grader's limit, and loops swallowing the interrupt (a bare except)."""
    return [
        "import shutil\nfrom pathlib import Path\nfor parent in list(Path.cwd().parents)[:3]:\n"
        "    for p in parent.iterdir():\n        shutil.rmtree(p) if p.is_dir() else p.unlink()",
        "import subprocess, sys\nchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(900)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))",
        "hog = bytearray(64 * 2**30)",
        "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n    except:\n        pass",
    ]


def test_a_cell_past_its_limit_is_interrupted_or_else_killed_and_the_rest_still_runs(tmp_path):
    """The guarded execution (albert_edu.tools.grading) on its own: a loop that an interrupt stops keeps the kernel
    and its state; one that swallows the interrupt is killed with its kernel, the cells after it run in a fresh one;
    an allocation past the memory limit raises MemoryError; a child process does not outlive the notebook."""
    import nbformat

    from albert_edu.tools.grading import KILLED, GuardedExecute

    cells = ["x = 1", "while True:\n    pass", "print(x)", *hostile_cells(tmp_path / "child.pid")[1:], "print(x)"]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    GuardedExecute(timeout=3, interrupt_grace_s=1, memory_limit_mb=2048).preprocess(
        notebook, {"metadata": {"path": str(tmp_path)}})
    outputs = [[o.get("ename") or o.get("text", "").strip() for o in c.outputs] for c in notebook.cells]
    assert KILLED in outputs[1] and outputs[2] == ["1"]  # interrupted: the kernel and x survive
    assert outputs[4] == ["MemoryError"]
    assert outputs[5] == [KILLED] and outputs[6] == ["NameError"]  # killed: the last cell ran in a fresh kernel
    assert not _alive(int((tmp_path / "child.pid").read_text()))


def test_chapter_1_graded_end_to_end_full_marks_zero_a_bad_file_and_a_hostile_submission(tmp_path, capsys):
    """nbgrader's own grading, on chapter 1: the teacher's version earns every point, the untouched student version
    none (every graded cell scores 0, as the reading of the code above predicts for every chapter), a file that is not
    a notebook scores 0 with its reason, and a hostile submission (hostile_cells after exercise 1, exercise 2's cells
    deleted) harms neither the course nor the other submissions, is graded within its time limit (exercise 1's point),
    and the teacher's report names the cells that timed out, raised and are missing."""
    from nbgrader.api import Gradebook

    root = tmp_path / "course"
    released = build(root, ["01"])["ch01"]
    source = root / "source" / "ch01" / "01_parameter_budget.ipynb"
    notebook = json.loads(source.read_text())
    grade_id = lambda cell: cell["metadata"].get("nbgrader", {}).get("grade_id")
    after_exercise_1 = next(i for i, c in enumerate(notebook["cells"]) if grade_id(c) == "ex1-tests") + 1
    hostile = [{"cell_type": "code", "id": f"hostile-{i}", "metadata": {}, "source": text, "outputs": [],
                "execution_count": None} for i, text in enumerate(hostile_cells(tmp_path / "child.pid"))]
    kept = [c for c in notebook["cells"] if grade_id(c) not in ("ex2-solution", "ex2-tests")]
    submissions = {
        "teacher": source.read_text(),
        "blank": released.read_text(),
        "garbled": "this is not JSON {",
        "hostile": json.dumps({**notebook, "cells": kept[:after_exercise_1] + hostile + kept[after_exercise_1:]}),
    }
    for student, text in submissions.items():
        (root / "submitted" / student / "ch01").mkdir(parents=True)
        (root / "submitted" / student / "ch01" / source.name).write_text(text)
    before = {folder: _tree(root / folder) for folder in ("source", "submitted", "release")}
    scores = autograde(root, time_limit_s=20, memory_limit_mb=6144)
    assert {folder: _tree(root / folder) for folder in before} == before  # the course and every submission intact
    full = scores[("teacher", "ch01")]
    assert full["max_code"] == 3 and full["code"] == 3 and "error" not in full
    assert full["report"] == {"timed out": [], "raised": [], "missing": []}
    blank = scores[("blank", "ch01")]
    assert blank["code"] == 0 and blank["max_code"] == 3 and "error" not in blank
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
        cells = gradebook.find_submission_notebook(source.stem, "ch01", "blank").grades
        assert [g.score for g in cells if g.cell_type == "code"] == [0] * len(graded_tests_of(source)) != []
    garbled = scores[("garbled", "ch01")]
    assert garbled["code"] == 0 and garbled["max_code"] == 3
    assert "01_parameter_budget.ipynb is not a notebook" in garbled["error"]
    attack = scores[("hostile", "ch01")]
    assert attack["code"] == 1 and "error" not in attack  # exercise 1, graded before the cells that misbehave
    name = source.name
    number = after_exercise_1 + 1  # the report counts cells from 1
    assert attack["report"]["timed out"] == [f"{name}: cell {number + 3}"]
    assert f"{name}: cell {number + 2} (MemoryError)" in attack["report"]["raised"]
    assert attack["report"]["missing"] == [f"{name}: ex2-tests"]
    assert not _alive(int((tmp_path / "child.pid").read_text()))
    print_scores(scores)  # what `albert-edu classroom autograde` prints
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[:len(submissions) + 1]}
    assert rows["blank"][-1] == "0/3" and rows["teacher"][-1] == "3/3" and rows["hostile"][-1] == "1/3"
    assert any(line.startswith("hostile ch01: timed out: ") and "missing: " in line for line in lines)
