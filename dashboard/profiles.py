"""Which profiles the dashboard offers (bundled, plus those the environment names) and loading them once."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from engine.errors import ProfileFormatError
from engine.profile import Profile, bundled_profiles

# Extra profile files for the app and notebook (tests point these at SYNTHETIC profiles explicitly):
PROFILE_ENV = "UCUDNN_PROFILE"  # one or more files, separated by os.pathsep
PROFILE_DIR_ENV = "UCUDNN_PROFILE_DIR"  # one or more folders of *.profile.json[.gz]


def profile_name(path: Path) -> str:
    """``SYNTHETIC-alexnet.profile.json.gz`` -> ``SYNTHETIC-alexnet``."""
    name = path.name
    return name.split(".profile")[0] if ".profile" in name else name.split(".json")[0]


def discover_profiles(environ=None) -> tuple[dict[str, Path], list[str]]:
    """Bundled profiles plus those named by the environment, and one warning per bad entry.

    Extra profiles override bundled ones of the same name, so a test can serve exactly what it chose.
    """
    environ = os.environ if environ is None else environ
    found: dict[str, Path] = dict(bundled_profiles())
    warnings: list[str] = []
    for folder in filter(None, environ.get(PROFILE_DIR_ENV, "").split(os.pathsep)):
        d = Path(folder)
        if not d.is_dir():
            warnings.append(f"{PROFILE_DIR_ENV}: {folder!r} is not a folder")
            continue
        for p in sorted(d.glob("*.profile.json*")):
            found[profile_name(p)] = p
    for file in filter(None, environ.get(PROFILE_ENV, "").split(os.pathsep)):
        p = Path(file)
        if not p.is_file():
            warnings.append(f"{PROFILE_ENV}: {file!r} does not exist")
            continue
        found[profile_name(p)] = p
    return found, warnings


def requested_profiles(environ=None) -> list[str]:
    """Names of the profiles ${PROFILE_ENV} names: the page opens on the first (someone asked for it)."""
    environ = os.environ if environ is None else environ
    return [profile_name(Path(f)) for f in environ.get(PROFILE_ENV, "").split(os.pathsep) if f and Path(f).is_file()]


@lru_cache(maxsize=16)
def _load(path: str, mtime: float) -> Profile:
    return Profile.load(path)


def load_profile(path: str | Path) -> Profile:
    """Load once per process (profiles are read-only); a changed file is read again."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        raise ProfileFormatError(f"profile {str(path)!r} does not exist") from None
    return _load(str(path), mtime)
