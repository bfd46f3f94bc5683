"""Classroom assignments (albert_edu.classroom): every chapter's exercises are in nbgrader's format, the student
versions hold no solutions, reference solutions score full marks and untouched student versions score zero."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from albert_edu.book import CHAPTERS, load_book
from albert_edu.classroom import SOLUTION_MARKERS, assignment_name, autograde, build, graded_chapters, read_scores

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
        for c in solutions:
            source = "".join(c["source"])
            assert c["cell_type"] == "markdown" or ("### BEGIN SOLUTION" in source and "### END SOLUTION" in source)
        for c in tests:
            assert c["metadata"]["nbgrader"]["points"] > 0 and c["metadata"]["nbgrader"]["locked"]


def solution_lines(path):
    """The lines between the solution and hidden-test markers of a chapter (long enough to be telling)."""
    lines = []
    for c in nbgrader_cells(path):
        source = "".join(c["source"])
        for block in re.findall(r"### BEGIN (?:SOLUTION|HIDDEN TESTS)\n(.*?)### END", source, re.S):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 12]
        if c["cell_type"] == "markdown" and c["metadata"]["nbgrader"]["solution"]:
            lines += [line.strip() for line in source.splitlines() if len(line.strip()) > 12]
    return lines


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, build(root)


def test_student_versions_hold_no_solutions(course):
    root, released = course
    assert sorted(released) == sorted(assignment_name(f) for f in graded_chapters())
    for name, path in released.items():
        text = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        assert not [m for m in SOLUTION_MARKERS if m in text], name
        assert "raise NotImplementedError()" in text or "YOUR ANSWER HERE" in text, name
        source = root / "source" / name / path.name
        cells = json.loads(source.read_text())["cells"]
        elsewhere = "\n".join(re.sub(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?### END \\1", "", "".join(c["source"]), flags=re.S)
                              for c in cells if not (c["cell_type"] == "markdown" and "nbgrader" in c["metadata"]
                                                     and c["metadata"]["nbgrader"]["solution"]))
        telling = [line for line in solution_lines(source) if line not in elsewhere]
        assert telling, f"{name}: no solution line to look for"
        leaked = [line for line in telling if line in text]
        assert not leaked, f"{name}: {leaked[:3]}"


def test_reference_solutions_score_full_marks_and_blank_versions_zero(course):
    root, released = course
    for name in ("ch01", "ch03"):  # two quick chapters; grading executes the whole chapter
        for student, folder in (("teacher", "source"), ("blank", "release")):
            shutil.copytree(root / folder / name, root / "submitted" / student / name)
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "autograde", "--course", str(root)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    scores = read_scores(root)
    for name in ("ch01", "ch03"):
        teacher, blank = scores[("teacher", name)], scores[("blank", name)]
        assert teacher["max_code"] > 0 and teacher["code"] == teacher["max_code"], (name, teacher)
        assert blank["code"] == 0 and blank["max_code"] == teacher["max_code"], (name, blank)
    table = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()[1:] if line.split()[0] in scores_students(scores)}
    assert table["teacher"][-1] == table["teacher"][-1].split("/")[1] + "/" + table["teacher"][-1].split("/")[1]
    assert table["blank"][-1].startswith("0/")


def scores_students(scores):
    return {student for student, _ in scores}


def test_errors_are_clear(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "classroom", "build", "--course", str(tmp_path), "42"],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "chapter '42' has no exercises or does not exist" in result.stderr
    with pytest.raises(FileNotFoundError, match="no submissions in"):
        autograde(tmp_path)
