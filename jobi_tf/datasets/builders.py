"""TensorFlow-Datasets builders for the named knowledge-graph benchmarks.

One builder per benchmark, all sharing `KGTriplesBuilder`: it reads ``train.txt``,
``valid.txt`` and ``test.txt`` from a manual folder when one is given (fully offline) and
otherwise downloads the public archive. Every file goes through `parse_triples_text`, so a
malformed line fails with file:line instead of becoming a silently different benchmark,
and, where the published file's sha256 is known, through a checksum check.

This module imports `tensorflow_datasets` at import time (the classes subclass it); import
it only from inside functions so that ``import jobi_tf.datasets`` stays cheap.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import os
import re
import socket
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from jobi_tf.data.triples import parse_triples_text
from jobi_tf.runtime.errors import DatasetFormatError, JobiError

__all__ = [
    "KGTriplesBuilder",
    "FB15k237",
    "FB15k",
    "WN18RR",
    "YAGO310",
    "Kinship",
    "UMLS",
    "Nations",
    "BUILDERS",
    "TFDS_TO_FILE_SPLIT",
]

logger = logging.getLogger(__name__)

#: TFDS split name -> file stem of the published split (``validation`` is ``valid.txt``).
TFDS_TO_FILE_SPLIT: Mapping[str, str] = {"train": "train", "validation": "valid", "test": "test"}

#: Example keys are ``f"{split}:{line:0{_KEY_DIGITS}d}"``. With ``disable_shuffling`` TFDS
#: documents that examples are sorted by key (as strings here), while TFDS 4.9.10 in fact
#: replaces non-int keys by the generation index; zero-padding keeps file order under both
#: (9 digits cover any benchmark here; YAGO3-10 train, the largest, has 1,079,040 lines).
_KEY_DIGITS = 9

#: Seconds to wait for the archive's host before declaring the network unavailable.
_CONNECT_TIMEOUT_S = 10.0

_CITATIONS_FILE = Path(__file__).with_name("CITATIONS.bib")
#: The published split files' sha256 (``dataset<TAB>split<TAB>sha256`` rows after a header;
#: split is the file stem), kept as data beside the builders as TFDS keeps its checksums.tsv.
_SHA256_FILE = Path(__file__).with_name("split_sha256.tsv")
_CONVE_RAW = "https://raw.githubusercontent.com/TimDettmers/ConvE/master"
_CONVE_MEMBERS: Mapping[str, str] = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}


def _manual_instructions(url: str, members: Mapping[str, str], crlf: bool = False) -> str:
    """Build the TFDS manual-download text from the archive URL and its member paths."""
    listed = ", ".join(f"{members[split]} as {TFDS_TO_FILE_SPLIT[split]}.txt" for split in TFDS_TO_FILE_SPLIT)
    endings = "LF or CRLF line endings (the CR is stripped)" if crlf else "LF line endings"
    return (
        "Put train.txt, valid.txt and test.txt in the manual folder: one "
        f"head<TAB>relation<TAB>tail triple per line, UTF-8, {endings}, no header. "
        f"They are the members of {url}: {listed}."
    )


def _published_sha256(name: str) -> dict[str, str] | None:
    """``{file stem: sha256}`` of benchmark ``name``'s split files, None where none is known."""
    rows = [line.split("\t") for line in _SHA256_FILE.read_text(encoding="utf-8").splitlines()[1:]]
    found = {stem: digest for dataset, stem, digest in rows if dataset == name}
    return found or None


def _citation(keys: tuple[str, ...]) -> str:
    """Return the BibTeX entries named by ``keys`` from CITATIONS.bib ("" if it is absent)."""
    try:
        text = _CITATIONS_FILE.read_text(encoding="utf-8")
    except OSError:
        return ""
    entries = re.finditer(r"^@\w+\{([^,]+),.*?^\}", text, flags=re.MULTILINE | re.DOTALL)
    by_key = {entry.group(1): entry.group(0) for entry in entries}
    return "\n\n".join(by_key[key] for key in keys if key in by_key)


class KGTriplesBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared logic of the benchmark builders; subclasses only fill in class attributes.

    Args:
        verify_checksums: compare each split file's sha256 (after the documented CRLF
            normalisation) with the published one in `SHA256`. Turn off only to build from
            files that are knowingly different, e.g. small test fixtures.
        **kwargs: passed to `tfds.core.GeneratorBasedBuilder` (``data_dir``, ...).
    """

    # Version of the prepared TFDS data; bump it when the generated examples change.
    VERSION = tfds.core.Version("1.0.0")
    # Per-version changes, shown by TFDS in the dataset catalog and `info`.
    RELEASE_NOTES = {"1.0.0": "First release: the published splits, in file order."}
    # Name used by jobi_tf (``load_named``) and in error messages, e.g. "fb15k-237".
    JOBI_NAME: str = ""
    # Public ``.tar.gz`` holding the three splits; downloaded only without a manual folder.
    URL: str = ""
    # Path inside the extracted archive of each TFDS split's file.
    ARCHIVE_MEMBERS: Mapping[str, str] = _CONVE_MEMBERS
    # Expected sha256 of each split file (keyed by file stem) after CRLF normalisation;
    # None where no verified value is known, so no check is possible. Read from
    # split_sha256.tsv for each benchmark, unless the class sets it.
    SHA256: Mapping[str, str] | None = None
    # True where the upstream files are known to use CRLF: strip the CR of each line end.
    STRIP_TRAILING_CR: bool = False
    # Where to read about the dataset (TFDS `homepage`).
    HOMEPAGE: str = "https://github.com/TimDettmers/ConvE"
    # Keys of this dataset's entries in CITATIONS.bib (TFDS `citation`).
    CITATION_KEYS: tuple[str, ...] = ()
    # What TFDS prints when the manual folder is needed; made from the attributes above.
    MANUAL_DOWNLOAD_INSTRUCTIONS = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        """A benchmark's TFDS name ("jobi_" avoids clashes in TFDS's registry, which cannot hold
        "-"), its manual-download text and its checksums follow from `JOBI_NAME`, `URL` and
        `ARCHIVE_MEMBERS`; set before TFDS registers the class, which reads ``name``."""
        if cls.JOBI_NAME:
            cls.name = "jobi_" + cls.JOBI_NAME.replace("-", "_")
            if "SHA256" not in cls.__dict__:
                cls.SHA256 = _published_sha256(cls.JOBI_NAME)
            cls.MANUAL_DOWNLOAD_INSTRUCTIONS = _manual_instructions(
                cls.URL, cls.ARCHIVE_MEMBERS, crlf=cls.STRIP_TRAILING_CR
            )
        super().__init_subclass__(**kwargs)

    def __init__(self, *, verify_checksums: bool = True, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._verify_checksums = verify_checksums
        # TFDS re-creates builders from `_original_state` when pickling; keep our flag.
        self._original_state["verify_checksums"] = verify_checksums

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> tfds.core.Path:
        """Return this module's file without TFDS's lookup, which needs `importlib_resources`.

        TFDS 4.9.10 resolves the path of builders outside its own package through
        `importlib_resources`, a package it only declares for Python < 3.9
        (tensorflow/datasets#11212); TFDS uses the path to look for a checksums file.
        """
        return tfds.core.Path(inspect.getfile(cls))

    def _info(self) -> tfds.core.DatasetInfo:
        """Declare three string features and keep the generated examples in file order."""
        return tfds.core.DatasetInfo(
            builder=self,
            description=f"{self.JOBI_NAME} knowledge-graph completion benchmark, published splits in file order.",
            features=tfds.features.FeaturesDict({"head": tf.string, "relation": tf.string, "tail": tf.string}),
            supervised_keys=None,
            disable_shuffling=True,
            homepage=self.HOMEPAGE,
            citation=_citation(self.CITATION_KEYS),
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Iterator]:
        """Read and validate every split up front, so a bad file fails before any writing."""
        paths = self._manual_paths(dl_manager)
        if paths is None:
            paths = self._download_paths(dl_manager)
        triples = {split: self._read_split(path, split) for split, path in paths.items()}
        return {split: self._generate_examples(triples[split], split) for split in TFDS_TO_FILE_SPLIT}

    def _generate_examples(self, triples: np.ndarray, split: str) -> Iterator[tuple[str, dict[str, str]]]:
        """Yield one example per line, keyed by split and zero-padded 1-based line number."""
        for line, (head, relation, tail) in enumerate(triples, start=1):
            yield f"{split}:{line:0{_KEY_DIGITS}d}", {"head": head, "relation": relation, "tail": tail}

    def _manual_paths(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Path] | None:
        """Return the split files of the manual folder, or None when it holds none of them."""
        try:
            folder = Path(os.fspath(dl_manager.manual_dir))
        except AssertionError:  # TFDS: the manual folder is missing or empty.
            return None
        paths = {split: folder / f"{stem}.txt" for split, stem in TFDS_TO_FILE_SPLIT.items()}
        present = [path.name for path in paths.values() if path.is_file()]
        if not present:
            logger.info("%s: no split files in manual folder %s; downloading", self.JOBI_NAME, folder)
            return None
        if len(present) < len(paths):
            missing = [path.name for path in paths.values() if not path.is_file()]
            raise DatasetFormatError(folder, f"manual folder for {self.JOBI_NAME} lacks {', '.join(missing)}")
        logger.info("%s: reading manual folder %s", self.JOBI_NAME, folder)
        return paths

    def _download_paths(self, dl_manager: tfds.download.DownloadManager) -> dict[str, Path]:
        """Download and extract the public archive; any failure becomes a one-line JobiError."""
        _check_reachable(self.URL, self.JOBI_NAME)
        resource = tfds.download.Resource(url=self.URL, extract_method=tfds.download.ExtractMethod.TAR_GZ)
        try:
            extracted = Path(os.fspath(dl_manager.download_and_extract(resource)))
        except Exception as exc:  # requests, urllib3, TFDS checksum and extraction errors alike
            reason = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise JobiError(
                f"{self.JOBI_NAME}: cannot download {self.URL} ({type(exc).__name__}: {reason}); "
                + _offline(self.JOBI_NAME)
            ) from exc
        return {split: extracted / member for split, member in self.ARCHIVE_MEMBERS.items()}

    def _read_split(self, path: Path, split: str) -> np.ndarray:
        """Read, normalise, validate and (where known) checksum one split file."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DatasetFormatError(path, f"file not found (expected the {split} split of {self.JOBI_NAME})") from None
        except OSError as exc:
            raise DatasetFormatError(path, f"cannot read: {exc.strerror}") from None
        if self.STRIP_TRAILING_CR:
            data = _strip_trailing_cr(data)
        triples = parse_triples_text(data, path)
        stem = TFDS_TO_FILE_SPLIT[split]
        expected = self.SHA256.get(stem) if self.SHA256 else None
        if self._verify_checksums and expected is not None:
            actual = hashlib.sha256(data).hexdigest()
            if actual != expected:
                raise DatasetFormatError(
                    path,
                    f"sha256 mismatch for {self.JOBI_NAME} {stem}.txt: expected {expected}, got {actual} "
                    "(not the published file; pass verify_checksums=False to use it anyway)",
                )
        return triples


def _check_reachable(url: str, name: str) -> None:
    """Fail in seconds when the archive's host cannot be reached.

    TFDS's downloader retries a failed connection 10 times with exponential backoff, which
    takes minutes offline before it gives up. Skipped when a proxy is configured, because
    the host may then be reachable only through it.
    """
    if urllib.request.getproxies():
        return
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=_CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise JobiError(
            f"{name}: cannot reach {parts.hostname} to download {url} ({type(exc).__name__}: {exc}); {_offline(name)}"
        ) from exc


def _offline(name: str) -> str:
    """What to do without network, in the words of the command line (and of Python's ``data_dir``)."""
    return (
        f"without network, give a local copy: --data-dir FOLDER (data_dir= in Python) with train.txt, valid.txt, "
        f"test.txt, or put them in $JOBI_TF_DATA_DIR/{name}/"
    )


def _strip_trailing_cr(data: bytes) -> bytes:
    """Turn CRLF line ends into LF; a CR anywhere else is left for the validator to report."""
    data = data.replace(b"\r\n", b"\n")
    return data[:-1] if data.endswith(b"\r") else data


class FB15k237(KGTriplesBuilder):
    """FB15k-237 (Toutanova and Chen, 2015), as distributed with ConvE."""

    JOBI_NAME = "fb15k-237"
    URL = f"{_CONVE_RAW}/FB15k-237.tar.gz"
    # The ConvE copies use CRLF line endings; the CR is not part of the entity ids.
    STRIP_TRAILING_CR = True
    CITATION_KEYS = ("toutanova2015observed",)


class FB15k(KGTriplesBuilder):
    """FB15k (Bordes et al., 2013); has test leakage through inverse relations (see FB15k-237)."""

    JOBI_NAME = "fb15k"
    # Mirror of the original release (everest.hds.utc.fr/doku.php?id=en:transe, fb15k.tgz),
    # used by facebookresearch/PyTorch-BigGraph and StarSpace; the original host is often down.
    URL = "https://dl.fbaipublicfiles.com/starspace/fb15k.tgz"
    ARCHIVE_MEMBERS = {
        "train": "FB15k/freebase_mtr100_mte100-train.txt",
        "validation": "FB15k/freebase_mtr100_mte100-valid.txt",
        "test": "FB15k/freebase_mtr100_mte100-test.txt",
    }
    HOMEPAGE = "https://everest.hds.utc.fr/doku.php?id=en:transe"
    CITATION_KEYS = ("bordes2013transe",)


class WN18RR(KGTriplesBuilder):
    """WN18RR (Dettmers et al., 2018), WN18 without its inverse-relation test leakage."""

    JOBI_NAME = "wn18rr"
    URL = f"{_CONVE_RAW}/WN18RR.tar.gz"
    CITATION_KEYS = ("dettmers2018conve",)


class YAGO310(KGTriplesBuilder):
    """YAGO3-10 (Dettmers et al., 2018): YAGO3 entities with at least 10 relations."""

    JOBI_NAME = "yago3-10"
    URL = f"{_CONVE_RAW}/YAGO3-10.tar.gz"
    CITATION_KEYS = ("dettmers2018conve", "mahdisoltani2015yago3")


class Kinship(KGTriplesBuilder):
    """Kinship (Alyawarra kinship terms), the split distributed with ConvE; ~48% inverse relations."""

    JOBI_NAME = "kinship"
    URL = f"{_CONVE_RAW}/kinship.tar.gz"
    CITATION_KEYS = ("kemp2006irm", "dettmers2018conve")


class UMLS(KGTriplesBuilder):
    """UMLS (biomedical concepts), the split distributed with ConvE."""

    JOBI_NAME = "umls"
    URL = f"{_CONVE_RAW}/umls.tar.gz"
    CITATION_KEYS = ("kemp2006irm", "dettmers2018conve")


class Nations(KGTriplesBuilder):
    """Nations (international relations), the split distributed with ConvE; >95% inverse relations."""

    JOBI_NAME = "nations"
    URL = f"{_CONVE_RAW}/nations.tar.gz"
    CITATION_KEYS = ("kemp2006irm", "dettmers2018conve")


#: jobi_tf dataset name -> builder class, in the order of `jobi_tf.datasets.NAMES`.
BUILDERS: Mapping[str, type[KGTriplesBuilder]] = {
    cls.JOBI_NAME: cls for cls in (FB15k237, FB15k, WN18RR, YAGO310, Kinship, UMLS, Nations)
}
