"""The book's manifest: book.toml read and checked, the paths of the project, and the environment that every
chapter kernel gets (the runner, nbval and the classroom use the same one).

Standard library only: the toolbox must keep working while a chapter's exported code is broken.
"""

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent
CHAPTERS = ROOT / "chapters"
BUILD = ROOT / "_build"

MODULE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Hand-written modules of albert_edu that no chapter may overwrite: the chapters' set-up helper, the explorers,
# the command-line entry point and this toolbox.
HAND_WRITTEN = ("notebook", "explorers", "tools", "__main__", "__init__")


class BookError(Exception):
    """A problem with book.toml or a chapter that the author has to fix."""


@dataclass(frozen=True)
class Chapter:
    file: str
    title: str
    modules: tuple[str, ...]
    public: tuple[str, ...] = ()   # names of its modules that `from albert_edu import ...` offers

    @property
    def path(self) -> Path:
        return CHAPTERS / self.file

    @property
    def stem(self) -> str:
        return Path(self.file).stem


@dataclass(frozen=True)
class Book:
    title: str
    subtitle: str
    authors: tuple[str, ...]
    copyright: str
    chapters: tuple[Chapter, ...]
    seed: int
    threads: int
    cell_timeout_s: int
    chapter_budget_s: int
    book_budget_s: int

    def chapter(self, name: str) -> Chapter:
        """Find a chapter by file name, stem, path or number prefix ("1", "01")."""
        wanted = Path(name).name
        for chapter in self.chapters:
            number = chapter.file.split("_", 1)[0]
            if wanted in (chapter.file, chapter.stem) or (wanted.isdigit() and int(wanted) == int(number)):
                return chapter
        known = ", ".join(c.file for c in self.chapters)
        raise BookError(f"no chapter {name!r} in book.toml; expected one of: {known}")


def _require(table: dict, key: str, kind: type, where: str):
    if key not in table:
        raise BookError(f"book.toml: {where} has no {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise BookError(f"book.toml: {where}.{key} = {value!r} should be of type {kind.__name__}")
    return value


def load_book(path: Path = ROOT / "book.toml") -> Book:
    """Read and validate the manifest."""
    with open(path, "rb") as f:
        data = tomllib.load(f)
    test = _require(data, "test", dict, "the file")
    chapters = []
    for i, entry in enumerate(_require(data, "chapters", list, "the file")):
        where = f"chapters[{i}]"
        file = _require(entry, "file", str, where)
        if not re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", file):
            raise BookError(f"book.toml: {where}.file = {file!r} should look like 'NN_slug.ipynb'")
        modules = tuple(_require(entry, "modules", list, where))
        for module in modules:
            if not isinstance(module, str) or not MODULE_NAME.match(module) or module in HAND_WRITTEN:
                raise BookError(f"book.toml: {where}.modules has {module!r}; expected a lower-case module name "
                                f"other than {HAND_WRITTEN}")
        public = tuple(entry.get("public", []))
        for name in public:
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise BookError(f"book.toml: {where}.public has {name!r}; expected the public name of a class, "
                                f"function or constant")
        chapters.append(Chapter(file, _require(entry, "title", str, where), modules, public))
    files = [c.file for c in chapters]
    if len(set(files)) != len(files):
        raise BookError(f"book.toml lists a chapter twice: {files}")
    return Book(
        title=_require(data, "title", str, "the file"),
        subtitle=data.get("subtitle", ""),
        authors=tuple(_require(data, "authors", list, "the file")),
        copyright=_require(data, "copyright", str, "the file"),
        chapters=tuple(chapters),
        **{key: _require(test, key, int, "[test]")
           for key in ("seed", "threads", "cell_timeout_s", "chapter_budget_s", "book_budget_s")},
    )


def kernel_env(book: Book) -> dict[str, str]:
    """Environment variables every chapter kernel gets (the tests apply the same ones)."""
    threads = str(book.threads)
    return {
        "PYTHONHASHSEED": str(book.seed),
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        # Idle OpenMP threads sleep instead of spinning. Two chapters (or a chapter and a test) at once on 2 cores
        # then run 2 threads each without fighting: one small model's steps took 6 times as long side by side as
        # alone with spinning threads, 1.6 times with sleeping ones. Results do not change.
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",          # nothing is downloaded while a chapter runs
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TQDM_DYNAMIC_NCOLS": "0",
    }
