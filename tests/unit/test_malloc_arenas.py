# SPDX-License-Identifier: Apache-2.0
"""A service caps glibc's malloc arenas unless MALLOC_ARENA_MAX says otherwise."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from conductor.common import malloc_arenas


class _Libc:
    def __init__(self, answer: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.answer


def _with_libc(monkeypatch: pytest.MonkeyPatch, libc: Any) -> None:
    def load(name: str | None) -> Any:
        if isinstance(libc, Exception):
            raise libc
        return libc

    monkeypatch.setattr("ctypes.CDLL", load)


def test_the_cap_is_set_through_mallopt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    libc = _Libc()
    _with_libc(monkeypatch, libc)
    assert malloc_arenas.cap() == 2
    assert libc.calls == [(-8, 2)]  # M_ARENA_MAX


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")
    libc = _Libc()
    _with_libc(monkeypatch, libc)
    assert malloc_arenas.cap() is None
    assert libc.calls == []


@pytest.mark.parametrize("libc", [OSError("no libc"), object(), _Libc(answer=0)])
def test_without_glibc_or_a_refusal_nothing_changes(
    monkeypatch: pytest.MonkeyPatch, libc: Any
) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    _with_libc(monkeypatch, libc)
    assert malloc_arenas.cap() is None


def test_the_real_glibc_takes_it() -> None:
    """In a fresh process (glibc of this machine): mallopt accepts the cap."""
    code = "from conductor.common import malloc_arenas; print(malloc_arenas.cap())"
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "2"
