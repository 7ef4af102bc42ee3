"""What the page plans for: the profile, its engine set and the scope (network, mini-batch, dtype, layout),
plus the profile to compare with; derives the ``Analysis`` (dashboard/analysis.py). Imports no Panel.

Every change goes through ``_settle``: it works out a consistent selection (each control offered by the
one before it), sets the selectors' ``objects`` first (nothing watches them) and then every value and the
analysis in one ``param.update``, so watchers see options, values and analysis change together and never
a value that its options do not offer. ``_settle`` is idempotent: called again by its own update it finds
nothing to change.
"""

from __future__ import annotations

import os
from pathlib import Path

import param

from engine.errors import EngineError, UntrustedModelError
from engine.profile import ENGINE_SETS, Profile
from engine.pytorch.loader import trust
from engine.zoo import DEFAULT_BATCH

from .analysis import Analysis, analyse
from .compare import compare_options
from .errors import describe_error
from .profiles import PROFILE_ENV, discover_profiles, load_profile, requested_profiles
from .scopes import Scope, model_scopes, profile_scopes, zoo_scopes

NO_PROFILE = (
    f"No bundled profile: assets/profiles/ holds none yet. Profile a network on a GPU host "
    f"(Profile button), or point {PROFILE_ENV} at a profile file."
)
SCOPE = ("network", "batch", "precision", "layout")
MODELS_ENV = "UCUDNN_MODELS"  # module:callable models the person starting the server allows (comma-separated)
SYNTHETIC_NOTE = "SYNTHETIC profile: made-up numbers from the unit-test model, not measurements."


class SelectionState(param.Parameterized):
    """Profile, engine set, scope and comparison profile of one page; ``analysis`` follows them."""

    profile = param.Selector(default=None, objects=[], allow_None=True, doc="Profile name")
    engines = param.Selector(
        default="all",
        objects=list(ENGINE_SETS),
        label="Engines",
        doc="Plans the optimizers may use: all measured, only cuDNN's heuristic list (what a "
        "framework sees), or no NONDETERMINISTIC plans",
    )
    network = param.Selector(default=None, objects=[], allow_None=True)
    batch = param.Selector(default=None, objects=[], allow_None=True, label="Mini-batch size")
    precision = param.Selector(default=None, objects=[], allow_None=True, label="Data type")
    layout = param.Selector(default=None, objects=[], allow_None=True)
    model = param.String(
        default="",
        label="Another model",
        doc="A model the profile does not list (torchvision:NAME, or a module:callable named in "
        "UCUDNN_MODELS when the server started): offered wherever the profile measured all its kernels",
    )
    compare = param.Selector(
        default="",
        objects={"(none)": ""},
        label="Compare with",
        doc="A profile of the same network on another GPU, whose front is drawn beside this one",
    )

    analysis = param.ClassSelector(class_=Analysis, default=None, allow_None=True, constant=True)
    other = param.ClassSelector(
        class_=Analysis,
        default=None,
        allow_None=True,
        constant=True,
        doc="The compared profile's analysis of the same scope",
    )
    other_error = param.String(default="", constant=True, doc="Why the chosen comparison cannot be analysed")
    messages = param.List(default=[], constant=True, doc="(level, text) notes for the page")
    error = param.String(default="", constant=True, doc="Why there is no analysis, in one line")

    def __init__(self, profiles: dict | None = None, environ=None, **params):
        """``profiles``: name -> path or Profile; default: bundled plus the environment's (profiles.py).
        Keywords pick the profile, engine set and scope (kept where the profile offers them); a profile
        chosen later starts on the scope it records."""
        wanted = {k: params.pop(k) for k in ("profile", *SCOPE) if k in params}
        super().__init__(**params)
        warnings: list[str] = []
        requested: list[str] = []
        if profiles is None:
            profiles, warnings = discover_profiles(environ)
            requested = requested_profiles(environ)
        self._profiles: dict[str, Path | Profile] = dict(profiles)
        self._notes = [("warning", w) for w in warnings]
        self._restricted: dict[tuple[str, str], tuple[Profile, Profile]] = {}
        self._scopes: list[Scope] = []  # the profile's own (cached per profile)
        self._offered: list[Scope] = []  # those and the chosen model's
        self._scopes_of: tuple | None = None
        self._models: dict[tuple[str, str], tuple[list[Scope], str]] = {}  # (profile, model) -> model_scopes
        for name in (environ if environ is not None else os.environ).get(MODELS_ENV, "").split(","):
            if name.strip():
                trust(name.strip())
        self.param.profile.objects = list(self._profiles)
        if self._profiles:
            first = wanted.pop("profile", None) or self._default_profile(requested)
            with param.parameterized.discard_events(self):
                self.profile = first
        self._settle(wanted)
        self.param.watch(lambda *_e: self._settle(), ["profile", "engines", "compare", *SCOPE])
        self.param.watch(lambda e: self._settle({"network": e.new.strip()} if e.new.strip() else None), ["model"])

    # --- profiles ----------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self._profiles)

    def add_profile(self, name: str, profile: Profile, select: bool = True) -> None:
        """Offer a profile measured live on this host (the GPU "Profile" job)."""
        self._profiles[name] = profile
        self.param.profile.objects = list(self._profiles)
        if select:
            self.profile = name
        else:
            self._settle()  # the compare options may now include it

    def _default_profile(self, requested: list[str]) -> str:
        """The first profile named by ${UCUDNN_PROFILE}; else the first measured (non-SYNTHETIC) one, preferring
        tf32/NCHW (cuDNN's and PyTorch's default) and a powerOfTwo profile (the bundled ones hold the engine
        sweep; the bundled ``all`` profile predates it), ranked by file name so that only the chosen one is
        loaded."""
        if requested and requested[0] in self._profiles:
            return requested[0]

        def rank(name: str):
            n = name.lower()
            return ("tf32-nchw" not in n, n.endswith("-all"), "synthetic" in n, name)

        names = sorted(self._profiles, key=rank)
        for name in names:
            try:
                if not self.get_profile(name).synthetic:
                    return name
            except EngineError:
                continue
        return names[0]

    def profile_of(self, provenance: dict, network: str, batch: int) -> str | None:
        """Another listed profile that is the one ``provenance`` records (a plan's record of its profile: same
        GPU, date and command) and that measured ``network``, looking first at names that say the network and
        batch as the bundled ones do; None when there is none (profiles that do not load are skipped)."""

        def ident(prov: dict) -> tuple:
            return tuple(prov.get(k) for k in ("gpu", "date", "command"))

        key = ident(provenance)
        if None in key:
            return None
        hint = f"-{network}-b{batch}-".lower()
        for name in sorted(self._profiles, key=lambda n: hint not in n.lower()):
            if name == self.profile:
                continue
            try:
                profile = self.get_profile(name)
            except EngineError:
                continue
            if ident(profile.provenance) == key and any(n.get("name") == network for n in profile.networks):
                return name
        return None

    def get_profile(self, name: str, engines: str = "all") -> Profile:
        """The named profile, restricted to an engine set (kept, so the caches keyed by profile stay warm)."""
        src = self._profiles[name]
        profile = src if isinstance(src, Profile) else load_profile(src)
        if engines == "all":
            return profile
        base, restricted = self._restricted.get((name, engines), (None, None))
        if base is not profile:
            restricted = profile.restrict(engines)
            self._restricted[(name, engines)] = (profile, restricted)
        return restricted

    @property
    def scope(self) -> Scope | None:
        if None in (self.network, self.batch, self.precision, self.layout):
            return None
        return Scope(self.network, int(self.batch), self.precision, self.layout)

    @property
    def scopes(self) -> list[Scope]:
        """What the current profile can plan (the zoo when there is no profile), the chosen model included."""
        return self._offered

    # --- the one derivation ----------------------------------------------------------------------
    def _settle(self, wanted: dict | None = None) -> None:
        """Selectors, values and analysis from the current controls (``wanted`` overrides them)."""
        values = {k: getattr(self, k) for k in SCOPE}
        values.update(wanted or {})
        notes, error, profile = list(self._notes), "", None
        if not self._profiles:
            scopes = zoo_scopes()
            notes.append(("info", NO_PROFILE))
            error = NO_PROFILE
        else:
            try:
                profile = self.get_profile(self.profile)
                scopes = self._profile_scopes(profile)
                if not scopes:
                    error = f"profile {self.profile!r} covers no network of the zoo completely"
            except EngineError as err:
                scopes, error = [], describe_error(err)
            if profile is not None and profile.synthetic:
                notes.append(("warning", SYNTHETIC_NOTE))
        if profile is not None and self._scopes_of != (self.profile,) and wanted is None:
            values = recorded_scope(profile, scopes)  # a newly chosen profile shows what it was measured for
        self._scopes, self._scopes_of = scopes, (self.profile,) if profile is not None else None
        if profile is not None and self.model.strip():
            extra, note = self._model_scopes(profile, self.model.strip())
            scopes = scopes + [s for s in extra if s not in scopes]
            if note:
                notes.append(("warning", f"{self.model.strip()}: {note}"))
        self._offered = scopes
        options, chosen = cascade(scopes, values, zoo=not self._profiles)
        compare = compare_options(self.profile, list(self._profiles)) if self._profiles else {"(none)": ""}
        analysis, other, other_error = self.analysis, self.other, self.other_error
        scope = Scope(*(chosen[k] for k in SCOPE)) if None not in chosen.values() else None
        if error or scope is None:
            analysis, other, other_error = None, None, ""
            error = error or "the profile offers no complete network"
        else:
            try:
                analysis = analyse(self.get_profile(self.profile, self.engines), scope)
            except (EngineError, ValueError, KeyError) as err:
                analysis, error = None, describe_error(err)
        chosen["compare"] = self.compare if self.compare in compare.values() else ""
        if analysis is None or not chosen["compare"]:
            other, other_error = None, ""
        elif other is None or other.scope != scope or other.profile is not self._other_profile(chosen["compare"]):
            try:
                other, other_error = analyse(self.get_profile(chosen["compare"], self.engines), scope), ""
            except (EngineError, ValueError, KeyError) as err:
                other, other_error = None, f"cannot compare with {chosen['compare']}: {describe_error(err)}"
        for name in SCOPE:
            self.param[name].objects = options[name]
        self.param.compare.objects = compare
        derived = dict(analysis=analysis, other=other, other_error=other_error, messages=notes, error=error)
        changed = {k: v for k, v in {**chosen, **derived}.items() if not _same(getattr(self, k), v)}
        if changed:
            with param.edit_constant(self):
                self.param.update(**changed)

    def _profile_scopes(self, profile: Profile) -> list[Scope]:
        return self._scopes if self._scopes_of == (self.profile,) else profile_scopes(profile)

    def _model_scopes(self, profile: Profile, model: str) -> tuple[list[Scope], str]:
        key = (self.profile, model)
        if key not in self._models:
            try:
                self._models[key] = model_scopes(profile, model)
            except UntrustedModelError as err:  # the page's own rule, not the command line's
                self._models[key] = (
                    [],
                    (
                        f"{err.source} names Python code to run: a name typed in a page may only be a torchvision: "
                        f"model; to offer your own, start the server with {MODELS_ENV}={err.source}"
                    ),
                )
            except EngineError as err:  # not a model name, a model that cannot import
                self._models[key] = [], describe_error(err)
        return self._models[key]

    def _other_profile(self, name: str) -> Profile | None:
        try:
            return self.get_profile(name, self.engines)
        except EngineError:
            return None


def _same(a, b) -> bool:
    """Equal values (analyses by identity): an unchanged value is not set again, so no event fires."""
    if isinstance(a, Analysis) or isinstance(b, Analysis):
        return a is b
    return type(a) is type(b) and a == b


def recorded_scope(profile: Profile, scopes: list[Scope]) -> dict:
    """The first network the profile records at its profiled mini-batch, as control values ({} if none)."""
    for entry in profile.networks:
        scope = Scope(
            entry.get("name"), int(entry.get("batch", 0)), entry.get("precision", "tf32"), entry.get("layout", "NCHW")
        )
        if scope in scopes:
            return {k: getattr(scope, k) for k in SCOPE}
    return {}


def cascade(scopes: list[Scope], pick: dict, zoo: bool = False) -> tuple[dict, dict]:
    """Options and values of network -> batch -> precision -> layout, each offered by the ones before it;
    a picked value is kept where offered, else the default: the first offered, the largest (profiled)
    mini-batch, or the zoo's default mini-batch when profiling from scratch."""
    options, values = {}, {}
    for name in SCOPE:
        offered = list(dict.fromkeys(getattr(s, name) for s in scopes))
        if name == "batch":
            offered = sorted(offered)
        value = pick.get(name)
        if value not in offered:
            value = offered[0] if offered else None
            if name == "batch" and offered:
                default = DEFAULT_BATCH.get(values.get("network"))
                value = default if zoo and default in offered else max(offered)
        options[name], values[name] = offered, value
        scopes = [s for s in scopes if getattr(s, name) == value]
    return options, values
