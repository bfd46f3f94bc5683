"""Graded assignments from the chapters, with nbgrader.

    albert-edu classroom build [--course DIR] [CHAPTER ...]
    albert-edu classroom autograde [--course DIR] [--time-limit SECONDS]

`build` lays out an nbgrader course (default `_build/classroom`): one assignment per chapter that has
exercises, named `chNN`, with the chapter as its source (`source/chNN/NN_slug.ipynb`, solutions and hidden
tests included), and generates the student versions in `release/chNN/` (solutions replaced by a stub, hidden
tests removed). Students work in the same environment as the book (`make lab`), because a chapter imports
the library and reads the prepared data.

`autograde` grades every notebook placed in `submitted/<student>/chNN/`, as nbgrader expects, and prints a
table of scores per student and assignment. Hidden tests are put back from the source before grading.
"""

import ast
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from albert_edu.tools.manifest import BUILD, CHAPTERS, kernel_env, load_book

COURSE_DIR = BUILD / "classroom"
SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


class ClassroomError(Exception):
    """A course that cannot be built or graded as asked; the message says what was expected."""


CONFIG = """# Written by `albert-edu classroom build`; rebuilt each time.
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = "albert-edu"
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.Execute.timeout = {timeout}
c.Autograde.create_student = True
"""


def assignment_name(chapter_file: str) -> str:
    """"08_nsp_vs_sop.ipynb" -> "ch08"."""
    return "ch" + chapter_file.split("_", 1)[0]


def graded_chapters() -> list[str]:
    """The chapter files, in reading order, that hold nbgrader exercises."""
    return [c.file for c in load_book().chapters
            if any("nbgrader" in cell.get("metadata", {}) for cell in _cells(CHAPTERS / c.file))]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _select(chapters: list[str] | None) -> list[str]:
    available = graded_chapters()
    if not chapters:
        return available
    chosen = []
    for wanted in chapters:
        matches = [f for f in available if f.startswith(wanted.zfill(2) + "_") or f == wanted]
        if not matches:
            raise ClassroomError(f"chapter {wanted!r} has no exercises or does not exist: expected one of "
                             f"{[f.split('_', 1)[0] for f in available]}")
        chosen += matches
    return chosen


def nbgrader(course: Path, *args: str, time_limit_s: float | None = None) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course directory, in the book's kernel environment. A command still running
    after time_limit_s is killed with its process group; a kernel it started (in a session of its own) notices
    that its parent is gone and exits."""
    command = [sys.executable, "-m", "nbgrader", *args]
    env = {**os.environ, **kernel_env(load_book()),  # nbgrader calls alembic from PATH
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with subprocess.Popen(command, cwd=course, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            try:
                process.communicate(timeout=30)  # a kernel may still hold the pipes for a moment
            except subprocess.TimeoutExpired:
                pass
            raise ClassroomError(f"nbgrader {' '.join(args)} ran past its time limit of {time_limit_s:g} s") from None
    if process.returncode != 0:
        raise ClassroomError(f"nbgrader {' '.join(args)} failed (exit {process.returncode}):\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def build(course: Path = COURSE_DIR, chapters: list[str] | None = None) -> dict[str, Path]:
    """Write the course and generate the student versions. Returns {assignment: release notebook}."""
    course = Path(course).resolve()
    files = _select(chapters)
    course.mkdir(parents=True, exist_ok=True)
    book = load_book()
    (course / "nbgrader_config.py").write_text(CONFIG.format(root=str(course), timeout=book.cell_timeout_s))
    released = {}
    for file in files:
        name = assignment_name(file)
        shutil.rmtree(course / "source" / name, ignore_errors=True)
        (course / "source" / name).mkdir(parents=True)
        shutil.copy(CHAPTERS / file, course / "source" / name / file)
        released[name] = course / "release" / name / file
    # one nbgrader process for every assignment when source/ holds exactly these (a glob, which nbgrader expands;
    # each process takes seconds to start), else one per assignment, so that nothing else in source/ is regenerated
    if len(released) > 1 and sorted(p.name for p in (course / "source").iterdir()) == sorted(released):
        nbgrader(course, "generate_assignment", "*", "--force")
    else:
        for name in released:
            nbgrader(course, "generate_assignment", name, "--force")
    for name, file in zip(released, files):
        leaked = [m for m in SOLUTION_MARKERS if m in released[name].read_text()]
        if leaked:
            raise ClassroomError(f"{released[name]} still contains {leaked}: expected nbgrader to remove solutions")
        free = free_tests(released[name], course / "source" / name / file)
        if free:
            raise ClassroomError(f"{released[name]}: the graded tests {free} do not use anything the student writes, "
                                 f"so an unanswered notebook would earn their points")
    return released


# ---- what an unanswered notebook earns, read from the code --------------------------------------------------------
# Grading executes a notebook; reading it tells the same thing far sooner for the question a course must answer for
# every chapter: does each graded test fail while its exercise is unanswered? In a student version every solution is
# nbgrader's stub, `raise NotImplementedError()`: at the top of a cell it stops the cell, so nothing bound after it
# exists; inside a function it makes every call raise. A test cell fails when it runs into either. The reading below
# follows names from cell to cell; tests/test_classroom.py checks it against nbgrader's own grading of chapter 1.

def _is_stub(node: ast.AST) -> bool:
    exc = getattr(node, "exc", None)
    return isinstance(node, ast.Raise) and isinstance(exc, (ast.Name, ast.Call)) and \
        (exc.id if isinstance(exc, ast.Name) else getattr(exc.func, "id", None)) == "NotImplementedError"


def _walk_here(node: ast.AST):
    """The nodes that run when `node` runs: not the bodies of functions or lambdas it defines (those run when called),
    but their decorators and default values."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo += n.decorator_list + n.args.defaults + [d for d in n.args.kw_defaults if d is not None]
        elif isinstance(n, ast.Lambda):
            todo += n.args.defaults + [d for d in n.args.kw_defaults if d is not None]
        else:
            todo += ast.iter_child_nodes(n)


def _bound(statement: ast.stmt) -> set[str]:
    """The names a top-level statement binds."""
    names = set()
    for n in _walk_here(statement):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in n.names}
    return names


def _fails_when_run(statement: ast.stmt, broken: set[str]) -> bool:
    return any(_is_stub(n) or isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in broken
               for n in _walk_here(statement))


def _fails_when_called(definition: ast.stmt, broken: set[str]) -> bool:
    return any(_is_stub(n) or isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in broken
               for n in ast.walk(definition))


def _statements(code: str) -> list[ast.stmt]:
    try:
        return ast.parse(code).body
    except SyntaxError:  # a magic or a shell line: IPython runs it, but it reads none of our names
        return []


def _bound_by(statements: list[ast.stmt]) -> set[str]:
    return set().union(*map(_bound, statements))


def free_tests(student: Path, source: Path) -> list[str]:
    """The grade ids of the graded code tests of a student version that would pass with every exercise unanswered,
    read from the code (the tests with their hidden part, taken from `source`). [] is what a course needs."""
    graded = {c["metadata"]["nbgrader"]["grade_id"]: c for c in _cells(source)
              if c["cell_type"] == "code" and "nbgrader" in c.get("metadata", {})}
    tests = {grade_id: "".join(c["source"]) for grade_id, c in graded.items() if c["metadata"]["nbgrader"]["grade"]}
    broken, passing = set(), []
    for cell in _cells(student):
        if cell["cell_type"] != "code":
            continue
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        statements = _statements(tests.get(grade_id, "".join(cell["source"])))
        if grade_id in graded and grade_id not in tests:  # a solution cell: what the answer would have bound, it lacks
            broken |= _bound_by(_statements("".join(graded[grade_id]["source"]))) - _bound_by(statements)
        failed = False
        for statement in statements:
            failed = failed or _fails_when_run(statement, broken)
            names = _bound(statement)
            if failed or isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                    _fails_when_called(statement, broken):
                broken |= names
            else:
                broken -= names
        if grade_id in tests and not failed:
            passing.append(grade_id)
    return passing


GRADING_CONFIG = """
# Grading of one submission, apart (classroom.autograde): nbgrader's preprocessors, with its Execute guarded
c.CourseDirectory.db_url = {db_url!r}
c.Autograde.autograde_preprocessors = [
    "albert_edu.tools.grading.GuardedExecute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata"]
c.GuardedExecute.memory_limit_mb = {memory_limit_mb}
c.GuardedExecute.interrupt_grace_s = {grace_s}
"""
INTERRUPT_GRACE_S = 5.0  # how long a timed-out cell has to stop after SIGINT before its kernel is killed


def autograde(course: Path = COURSE_DIR, time_limit_s: float | None = None,
              memory_limit_mb: int = 0) -> dict[tuple[str, str], dict]:
    """Grade every submission in course/submitted. Returns {(student, assignment): scores}: the points of the
    code tests ("code", out of "max_code"), the points of written answers, which a teacher grades by hand in
    nbgrader's formgrader ("max_written"), and what went wrong in the graded notebook ("report": the cells that
    timed out, raised or were missing). Each submission is graded in a temporary copy of its assignment (grade_apart),
    so that its code reaches neither the other submissions nor the course by relative paths; the grades and the
    graded notebook are then copied into the course. A cell that runs longer than time_limit_s (default: book.toml's
    cell_timeout_s) is interrupted, and its kernel killed if the interrupt does not stop it; the rest of the
    notebook is graded. memory_limit_mb caps each kernel's address space (0: no cap). A submission that cannot be
    graded (not a notebook, refused by nbgrader, or still running after its notebook's time limit) scores 0, with
    the reason under "error"; the other submissions are graded all the same."""
    course = Path(course).resolve()
    submitted = sorted((course / "submitted").glob("*/ch*"))
    if not submitted:
        raise ClassroomError(f"no submissions in {course / 'submitted'}: expected "
                             f"submitted/<student>/<assignment>/<notebook>.ipynb")
    if memory_limit_mb < 0:
        raise ClassroomError(f"memory_limit_mb={memory_limit_mb}: expected a number of MiB, or 0 for no limit")
    limit = time_limit_s or load_book().cell_timeout_s
    failed, reports = {}, {}
    with tempfile.TemporaryDirectory(prefix="albert-edu-gradebook-") as tmp:
        blank = _blank_gradebook(course / "gradebook.db", Path(tmp) / "gradebook.db")
        for folder in submitted:
            key = (folder.parent.name, folder.name)
            try:
                reports[key] = grade_apart(course, folder, limit, memory_limit_mb, blank)
            except ClassroomError as error:
                lines = [line.strip() for line in str(error).splitlines() if line.strip()]
                failed[key] = " ".join(lines[:1] + lines[-1:] if len(lines) > 1 else lines)
    scores = read_scores(course, skip=set(failed))
    for key, report in reports.items():
        scores[key]["report"] = report
    for (student, assignment), reason in failed.items():
        code, written = assignment_points(course, assignment)
        scores[(student, assignment)] = {"code": 0, "max_code": code, "max_written": written, "error": reason}
    return scores


def _blank_gradebook(gradebook: Path, blank: Path) -> Path:
    """A copy of the course's gradebook without its students and their submissions: the assignments' cells, which
    grading needs, and nothing a submission could read about the others."""
    from nbgrader.api import Gradebook

    if not gradebook.is_file():
        raise ClassroomError(f"no gradebook at {gradebook}: expected `albert-edu classroom build` to have made it")
    shutil.copy(gradebook, blank)
    with Gradebook(f"sqlite:///{blank}") as copy:
        for student in [s.id for s in copy.students]:
            copy.remove_student(student)
    return blank


def grade_apart(course: Path, folder: Path, time_limit_s: float, memory_limit_mb: int, blank: Path) -> dict[str, list]:
    """Grade the submission in `folder` (course/submitted/<student>/<assignment>) in a temporary course that holds
    only its assignment's source and this submission, with a copy of the `blank` gradebook (_blank_gradebook)
    outside that course; then copy the graded notebooks to course/autograded and the grades into the course's
    gradebook. Returns the report of `graded_report`."""
    student, assignment = folder.parent.name, folder.name
    cells = _check_notebooks(folder)
    with tempfile.TemporaryDirectory(prefix="albert-edu-grading-") as tmp:
        apart, private = Path(tmp) / "course", Path(tmp) / "private"
        private.mkdir()
        shutil.copytree(course / "source" / assignment, apart / "source" / assignment)
        shutil.copytree(folder, apart / "submitted" / student / assignment)
        db = Path(shutil.copy(blank, private / "gradebook.db"))
        (apart / "nbgrader_config.py").write_text(
            CONFIG.format(root=str(apart), timeout=max(1, math.ceil(time_limit_s)))
            + GRADING_CONFIG.format(db_url=f"sqlite:///{db}", memory_limit_mb=int(memory_limit_mb),
                                    grace_s=INTERRUPT_GRACE_S))
        # each cell may use its limit, then the grace after an interrupt and a fresh kernel's start
        nbgrader(apart, "autograde", assignment, "--student", student, "--force",
                 time_limit_s=(time_limit_s + INTERRUPT_GRACE_S + 10) * (cells + 1))
        graded = apart / "autograded" / student / assignment
        if not graded.is_dir():
            raise ClassroomError(f"nbgrader wrote no graded notebook for {student}/{assignment}")
        shutil.rmtree(course / "autograded" / student / assignment, ignore_errors=True)
        shutil.copytree(graded, course / "autograded" / student / assignment)
        _copy_grades(db, course / "gradebook.db", assignment, student)
    return graded_report(course / "source" / assignment, course / "autograded" / student / assignment)


def _copy_grades(source_db: Path, target_db: Path, assignment: str, student: str) -> None:
    """The submission's automatic grades and comments from one gradebook into another (replacing any earlier
    grading there), each score at most its cell's points in the target (whose cells the submission cannot touch)."""
    from nbgrader.api import Gradebook, MissingEntry
    from sqlalchemy.exc import SAWarning

    with warnings.catch_warnings(), Gradebook(f"sqlite:///{source_db}") as source, \
            Gradebook(f"sqlite:///{target_db}") as target:
        warnings.filterwarnings("ignore", "Object of type", SAWarning)  # nbgrader's add_submission, as in its autograde
        done = source.find_submission(assignment, student)
        target.update_or_create_student(student)
        try:
            target.remove_submission(assignment, student)
            target.db.commit()
        except MissingEntry:
            pass
        target.add_submission(assignment, student, timestamp=done.timestamp)
        for notebook in done.notebooks:
            for grade in notebook.grades:
                copy = target.find_grade(grade.name, notebook.name, assignment, student)
                copy.auto_score = None if grade.auto_score is None else min(grade.auto_score, copy.max_score)
                copy.needs_manual_grade = grade.needs_manual_grade
            for comment in notebook.comments:
                target.find_comment(comment.name, notebook.name, assignment, student).auto_comment = \
                    comment.auto_comment
        target.db.commit()


def graded_report(source: Path, graded: Path) -> dict[str, list]:
    """What went wrong in a graded submission, for the teacher: the cells that timed out or raised (graded cells by
    their nbgrader name, the others as "cell N" of their notebook), and the graded cells of the source that the
    submission no longer has."""
    from albert_edu.tools.grading import KILLED

    report = {"timed out": [], "raised": [], "missing": []}
    for path in sorted(Path(source).glob("*.ipynb")):
        expected = [c["metadata"]["nbgrader"]["grade_id"] for c in _cells(path)
                    if c.get("metadata", {}).get("nbgrader", {}).get("grade")]
        submitted = Path(graded) / path.name
        graded_cells = _cells(submitted) if submitted.exists() else []
        present = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in graded_cells}
        report["missing"] += [f"{path.name}: {name}" for name in expected if name not in present]
        for number, cell in enumerate(graded_cells, 1):
            errors = [o["ename"] for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if not errors:
                continue
            name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {number}"
            if KILLED in errors:
                report["timed out"].append(f"{path.name}: {name}")
            else:
                report["raised"].append(f"{path.name}: {name} ({errors[-1]})")
    return report


def _check_notebooks(folder: Path) -> int:
    """The number of cells of the submitted notebooks; a file that is not a notebook is a ClassroomError."""
    cells = 0
    for path in sorted(folder.glob("*.ipynb")):
        try:
            cells += len(json.loads(path.read_text(encoding="utf-8"))["cells"])
        except (ValueError, KeyError, TypeError) as error:
            raise ClassroomError(f"{path.name} is not a notebook ({type(error).__name__}: {error})") from None
    return cells


def assignment_points(course: Path, assignment: str) -> tuple[float, float]:
    """The points of an assignment's code tests and written answers, from its source notebooks."""
    code = written = 0.0
    for path in (Path(course) / "source" / assignment).glob("*.ipynb"):
        for cell in _cells(path):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade"):
                if cell["cell_type"] == "code":
                    code += meta.get("points", 0)
                else:
                    written += meta.get("points", 0)
    return code, written


def read_scores(course: Path = COURSE_DIR, skip: set = frozenset()) -> dict[tuple[str, str], dict[str, float]]:
    """The gradebook's scores of every submission in course/submitted (see autograde), but those in `skip`."""
    from nbgrader.api import Gradebook

    course = Path(course).resolve()
    submitted = [f for f in sorted((course / "submitted").glob("*/ch*")) if (f.parent.name, f.name) not in skip]
    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for folder in submitted:
            s = gradebook.find_submission(folder.name, folder.parent.name)
            scores[(folder.parent.name, folder.name)] = {"code": s.code_score, "max_code": s.max_code_score,
                                                          "max_written": s.max_written_score}
    return scores


def print_scores(scores: dict[tuple[str, str], dict[str, float]]) -> None:
    """One row per student: code-test points per assignment and in total. Written answers are listed apart:
    they wait for a teacher."""
    students = sorted({s for s, _ in scores})
    assignments = sorted({a for _, a in scores})
    width = max(len(s) for s in students + ["student"])
    print("student".ljust(width), *[a.rjust(9) for a in assignments], "    total")
    for student in students:
        got = [scores.get((student, a)) for a in assignments]
        cells = [f"{g['code']:g}/{g['max_code']:g}".rjust(9) if g else "-".rjust(9) for g in got]
        total = sum(g["code"] for g in got if g), sum(g["max_code"] for g in got if g)
        print(student.ljust(width), *cells, f"{total[0]:g}/{total[1]:g}".rjust(9))
    written = {a: max(g["max_written"] for (_, b), g in scores.items() if b == a) for a in assignments}
    if any(written.values()):
        print("written answers to grade by hand (points): " +
              ", ".join(f"{a} {p:g}" for a, p in written.items() if p))
    for (student, assignment), s in sorted(scores.items()):
        if "error" in s:
            print(f"{student} {assignment}: scored 0 because {s['error']}")
        found = {what: cells for what, cells in s.get("report", {}).items() if cells}
        if found:
            print(f"{student} {assignment}: " + "; ".join(f"{what}: {', '.join(cells)}" for what, cells in found.items()))
