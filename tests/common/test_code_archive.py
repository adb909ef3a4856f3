"""The code archive's checks, shared by the puller and the local backend: digest, gzip tar,
and members that cannot land outside the directory they are unpacked into."""

import gzip
import io
import tarfile

import pytest

from plnt_common.code_archive import MAX_ARCHIVE_BYTES, archive_digest, check_archive
from plnt_common.errors import CodeInvalid
from plnt_testkit.code_archives import archive_with_symlink, code_archive


def checked(data: bytes) -> None:
    check_archive(data, digest=archive_digest(data), name="code.tar.gz")


def test_an_archive_of_files_and_folders_passes_and_is_summarised() -> None:
    data = code_archive({"pkg/__init__.py": "", "pkg/tools.py": "def f(x):\n    return x\n"})
    summary = check_archive(data, digest=archive_digest(data))
    assert (summary.files, summary.unpacked_bytes) == (2, len("def f(x):\n    return x\n"))


def test_the_same_files_give_the_same_bytes() -> None:
    assert code_archive({"a.py": "x = 1\n"}) == code_archive({"a.py": "x = 1\n"})


def test_an_archive_that_does_not_hash_to_its_pin_is_refused_naming_both_digests() -> None:
    data = code_archive({"a.py": "x = 1\n"})
    pinned = "sha256:" + "0" * 64
    with pytest.raises(CodeInvalid) as caught:
        check_archive(data, digest=pinned, name="code.tar.gz")
    assert pinned in str(caught.value) and archive_digest(data) in str(caught.value)
    assert caught.value.reason == "CodeInvalid"


def plain_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("a.py")
        archive.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (code_archive({"/etc/evil.py": "x"}, raw_members=True), "absolute path"),
        (code_archive({"../evil.py": "x"}, raw_members=True), "'..'"),
        (code_archive({"pkg/../../evil.py": "x"}, raw_members=True), "'..'"),
        (archive_with_symlink("link", "/etc/passwd"), "not a regular file or directory"),
        (plain_tar(), "not a gzip-compressed tar"),
        (gzip.compress(b"not a tar at all", mtime=0), "not a readable gzip tar"),
        (b"PK\x03\x04 a zip file", "not a gzip-compressed tar"),
    ],
    ids=["absolute", "dot-dot", "dot-dot-inside", "symlink", "uncompressed", "gzip-not-tar", "zip"],
)
def test_unsafe_or_malformed_archives_are_refused_as_code_invalid(
    data: bytes, problem: str
) -> None:
    with pytest.raises(CodeInvalid, match=r"code\.tar\.gz") as caught:
        checked(data)
    assert problem in str(caught.value)


def test_an_archive_over_the_size_bound_is_refused_before_hashing() -> None:
    with pytest.raises(CodeInvalid, match="bound"):
        check_archive(b"\x1f\x8b" + b"0" * MAX_ARCHIVE_BYTES, digest="sha256:" + "0" * 64)
