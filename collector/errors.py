"""Errors that end the program before anything starts, with exit code 2."""

from __future__ import annotations

from pathlib import Path


class ConfigError(Exception):
    """A configuration file is unusable: names the file, the key and the reason."""

    def __init__(self, file: str | Path, key: str, reason: str) -> None:
        self.file = str(file)
        self.key = key
        self.reason = reason
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = f"{self.file}: " if self.file else ""
        key = f"key '{self.key}': " if self.key else ""
        return f"{where}{key}{self.reason}"
