"""Reading PDU profile files (the models are exporters.pdu.profile's) with the one loader."""

from __future__ import annotations

from pathlib import Path

from collector.config import ConfigError, load_model
from exporters.pdu.profile import PROFILES_DIR, Profile


def load_profile(path: str | Path) -> Profile:
    """Load and validate one profile file; ConfigError names the file, key and reason."""
    return load_model(Profile, path)


def load_profiles(directory: str | Path = PROFILES_DIR) -> list[Profile]:
    """Every ``*.yaml`` profile in directory, sorted by name; names and prefixes must be unique."""
    profiles: list[Profile] = []
    seen_names: dict[str, Path] = {}
    seen_prefixes: dict[str, Path] = {}
    for path in sorted(Path(directory).glob("*.yaml")):
        profile = load_profile(path)
        if profile.name in seen_names:
            # The other file is named, never the value (the same rule as every config error).
            raise ConfigError(
                path, "name", f"the same name as the profile in {seen_names[profile.name].name}"
            )
        seen_names[profile.name] = path
        for i, prefix in enumerate(profile.sys_object_ids):
            if prefix in seen_prefixes:
                raise ConfigError(
                    path,
                    f"sys_object_ids[{i}]",
                    f"also claimed by the profile in {seen_prefixes[prefix].name}",
                )
            seen_prefixes[prefix] = path
        profiles.append(profile)
    return sorted(profiles, key=lambda p: p.name)
