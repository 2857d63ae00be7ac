"""`--members-dir` as a plain directory an operator (or anyone who can write to it) fills:
only regular files of at most 1 MiB, inside the directory (the kubelet's `..data` symlinks
included), are member files. A FIFO, a huge file and a symlink out of the directory are each
skipped with one warning; the look neither blocks nor reads them."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from mcsdns.controller.member.directory import MAX_FILE, MembersDir


def look(d: Path | MembersDir) -> list[str]:
    """The members one look at `d` finds, from another thread (the test fails if it blocks)."""
    out: list[str] = []
    members = d if isinstance(d, MembersDir) else MembersDir(str(d))
    t = threading.Thread(target=lambda: out.extend(members.look().added), daemon=True)
    t.start()
    t.join(60)
    assert not t.is_alive(), "the look blocked"
    return out


def test_a_fifo_is_skipped_without_blocking(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "east").write_text("clusters: []\n")
    os.mkfifo(tmp_path / "west")
    with caplog.at_level(logging.WARNING, "mcsdns.controller"):
        assert look(tmp_path) == ["east"]
    assert "skipping west: not a regular file" in caplog.text


def test_a_file_over_a_secrets_limit_is_skipped_unread(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    with open(tmp_path / "big", "wb") as f:  # sparse: 300 MB that take no disk
        f.truncate(300 << 20)
    (tmp_path / "edge").write_bytes(b"#" * MAX_FILE)
    with caplog.at_level(logging.WARNING, "mcsdns.controller"):
        d = MembersDir(str(tmp_path))
        assert list(d.scan()) == ["edge"]
        d.scan()
    assert caplog.text.count(f"skipping big: larger than {MAX_FILE} bytes") == 1, caplog.text


def test_symlinks_are_followed_only_inside_the_directory(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("token-of-the-controller\n")
    d = tmp_path / "members"
    data = d / "..2026_12_03"
    data.mkdir(parents=True)
    (data / "east").write_text("clusters: []\n")
    (d / "..data").symlink_to(data.name)
    (d / "east").symlink_to("..data/east")  # the kubelet's layout of a mounted Secret
    (d / "west").symlink_to(secret)  # out of the directory
    (d / "north").symlink_to("../secret.txt")
    with caplog.at_level(logging.WARNING, "mcsdns.controller"):
        assert look(d) == ["east"]
    for name in ("west", "north"):
        assert f"skipping {name}: a symlink to outside the directory" in caplog.text


def test_a_fixed_file_is_read_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    os.mkfifo(tmp_path / "west")
    d = MembersDir(str(tmp_path))
    with caplog.at_level(logging.WARNING, "mcsdns.controller"):
        assert look(d) == []
        os.unlink(tmp_path / "west")
        (tmp_path / "west").write_text("clusters: []\n")
        assert look(d) == ["west"]
