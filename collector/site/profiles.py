"""Reading PDU profile files (the models are exporters.pdu.profile's) with the one loader, and
the built-in ones merged with a site's own (the collector's profiles_dir, `wattbit pdu`'s
--profiles-dir)."""

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
        base = load_profile(path)
        try:
            variants = [base, *base.oem_profiles()]
        except ValueError as exc:  # an OEM entry whose moved profile does not validate
            raise ConfigError(path, "oems", str(exc).splitlines()[0]) from None
        for profile in variants:
            _unique(profile, path, seen_names, seen_prefixes)
            profiles.append(profile)
    return sorted(profiles, key=lambda p: p.name)


def _unique(
    profile: Profile, path: Path, seen_names: dict[str, Path], seen_prefixes: dict[str, Path]
) -> None:
    """ConfigError unless the profile's name and families are claimed by no earlier one."""
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


def site_profiles(profiles_dir: str | Path | None = None) -> list[Profile]:
    """The built-in profiles plus those in ``profiles_dir``; a site's profile of a built-in
    one's name replaces it."""
    profiles = load_profiles()
    if profiles_dir:  # None, or an empty --profiles-dir: the built-in ones alone
        extra = load_profiles(profiles_dir)
        names = {p.name for p in extra}
        profiles = [p for p in profiles if p.name not in names] + extra  # the site's win
    return profiles


def require_profile(profiles: list[Profile], name: str | None, file: str | Path, key: str) -> None:
    """ConfigError (naming the known ones) unless ``name`` is empty or one of ``profiles``."""
    known = {p.name for p in profiles}
    if name and name not in known:
        raise ConfigError(file, key, f"names no known profile (known: {', '.join(sorted(known))})")
