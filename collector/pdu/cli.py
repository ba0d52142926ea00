"""`wattbit pdu ...`: what wattbit makes of a PDU, live or from a recording.

    wattbit pdu detect ADDRESS --config collector.yml --auth NAME [--profile NAME]
    wattbit pdu check RECORDING [--profile NAME] [--profiles-dir DIR]
    wattbit pdu profiles [--markdown]

`detect` polls one PDU once, with the credentials of the collector's config, exactly as the
collector would: the profile chosen and why, the model, every outlet and the metrics it has.
`check` does the same on a recording (.snmprec, or net-snmp `snmpwalk -On` text as .snmpwalk)
served on the loopback, and puts beside every value the raw integer net-snmp's `snmpget`
reads from the same agent (the recording's own value when net-snmp is not installed).
`profiles` lists the profiles, their product families and the columns each requires.

Exit status: 0 when the PDU was read, 1 when it could not be (no answer, no profile), 2 for
usage and configuration errors.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from collector.config import ConfigError, duration_arg, load_model
from collector.site.config import AuthConfig, CollectorConfig, PduConfig
from collector.site.profiles import require_profile, site_profiles
from collector.site.targets import pdu_target
from exporters.pdu.decode import metered
from exporters.pdu.detect import (
    SYS_OBJECT_ID,
    Detection,
    Shape,
    shapes,
    shapes_in_walk,
    sys_object_id_of,
)
from exporters.pdu.poller import PduPoller, PduState, PduTarget
from exporters.pdu.profile import OUTLET_FIELDS, UNIT_FIELDS, Metric, Profile
from exporters.pdu.types import Reading
from exporters.snmp.client import Auth, SnmpClient, Target

EXIT_FAILED = 1
_UNITS = {
    "power_watts": "W",
    "current_amperes": "A",
    "voltage_volts": "V",
    "energy_joules": "J",
    "apparent_power_voltamperes": "VA",
}
# Net-snmp's snmpget reads at most this many OIDs per call (its own request limit is
# SNMP_MAX_CMDLINE_OIDS = 128).
_SNMPGET_CHUNK = 100


async def _poll_once(
    target: PduTarget, profiles: list[Profile]
) -> tuple[PduState, Detection, list[Shape]]:
    async with SnmpClient() as client:
        poller = PduPoller([target], profiles, client, interval=max(10.0, target.target.timeout))
        state = await poller.poll(target)
        found = poller.detections.get(target.name) or Detection(profiles[0], "", "")
        partial: list[Shape] = []
        if state.error == "no_profile":
            # What it would take: the known MIB shapes it answers in part (detect.shapes).
            got = await client.get(target.target, [SYS_OBJECT_ID])
            value = got.get(SYS_OBJECT_ID)
            oid = sys_object_id_of(value.value if value is not None else None)
            partial = await shapes(client, target.target, profiles, oid)
        return state, found, partial


def shapes_report(partial: list[Shape]) -> list[str]:
    """The lines saying which known MIB shapes an unread PDU answers in part, and what a
    profile for it would need (its signature columns the PDU lacks)."""
    lines = ["", "known MIB shapes it answers in part:"]
    if not partial:
        lines.append(
            "  none: no column of any profile's MIB answers, under its own enterprise or the "
            "PDU's. A new profile is needed: send `snmpwalk -On` of its enterprise subtree "
            "(docs/exporters/pdu.md, Adding a vendor)."
        )
        return lines
    for s in partial[:8]:
        p = s.profile
        head = f"  {p.name} ({p.vendor}, {p.mib})"
        if s.same_enterprise:
            head += ": the PDU's enterprise"
        lines.append(head)
        shown = ", ".join(s.answered[:6]) + (" ..." if len(s.answered) > 6 else "")
        lines.append(f"    answers {len(s.answered)} of its columns{': ' + shown if shown else ''}")
        lacking = ", ".join(s.lacking[:8]) + (" ..." if len(s.lacking) > 8 else "")
        lines.append(f"    lacks its signature columns (one would do): {lacking}")
    return lines


def _raw_values(host: str, port: int, community: str, oids: list[str]) -> dict[str, str] | None:
    """net-snmp's snmpget of each OID (-On -Oqv... kept as `OID value`); None: not installed."""
    exe = shutil.which("snmpget")
    if exe is None:
        return None
    out: dict[str, str] = {}
    for i in range(0, len(oids), _SNMPGET_CHUNK):
        part = oids[i : i + _SNMPGET_CHUNK]
        proc = subprocess.run(
            [exe, "-v2c", "-c", community, "-On", "-Oq", "-Oe", "-t", "2", "-r", "1",
             f"{host}:{port}", *part],
            capture_output=True, text=True, timeout=30, check=False,
            env={"MIBS": "", "MIBDIRS": "/nonexistent", "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        for line in proc.stdout.splitlines():
            oid, _, value = line.partition(" ")
            out[oid.lstrip(".")] = value.strip()
    return out


def _value_oid(spec: Metric, index: str) -> str:
    return f"{spec.oid}.{index}.{spec.suffix}" if spec.suffix else f"{spec.oid}.{index}"


def _outlet_specs(profile: Profile, reading: Reading) -> dict[str, Metric]:
    """The value columns of the outlet table the reading came from (a fallback's or not)."""
    if profile.outlets is None:
        return {}
    for table in profile.outlets.chain():
        if table.index_from == reading.outlet_table:
            return dict(table.metrics())
    return dict(profile.outlets.metrics())


def _report(
    state: PduState,
    found: Detection,
    raw: dict[str, str] | None,
    raw_source: str,
    partial: list[Shape] | None = None,
) -> str:
    lines = [f"pdu: {state.name}"]
    if not state.up or state.reading is None:
        lines.append(f"not read: {state.error}")
        if state.error == "no_profile":
            lines += shapes_report(partial or [])
        return "\n".join(lines)
    r = state.reading
    profile = found.profile
    lines += [
        f"profile: {profile.name} ({profile.vendor}, {profile.mib})",
        f"why: {found.why}",
        f"sysObjectID: {found.sys_object_id or '(none usable)'}",
        *(f"{k}: {v}" for k, v in r.identity.items() if k != "vendor" and v),
        f"outlets: {len(r.outlets)}",
    ]
    unit = [(f, getattr(r, f"unit_{f}")) for f in UNIT_FIELDS]
    lines.append("unit: " + ", ".join(f"{f} {v:g}" for f, v in unit if v is not None))
    for kind, rows in (("bank", r.banks), ("phase", r.phases)):
        if rows:  # what `feeds:` can map to a host (docs/exporters/pdu.md, Feeds)
            shown = ", ".join(
                f"{kind}:{b.index}"
                + (f" {b.power_watts:g} W" if b.power_watts is not None else "")
                + (f" {b.current_amperes:g} A" if b.current_amperes is not None else "")
                for b in rows
            )
            lines.append(f"{kind}s (feeds): {shown}")
    switched = [o for o in r.outlets if o.on is not None]
    if switched:
        on = sum(1 for o in switched if o.on)
        lines.append(f"switched: {on} on, {len(switched) - on} off")
    if not metered(r):
        lines.append("this PDU meters nothing the profile reads: its health only is exported")
    if r.invalid:
        lines.append("not readings: " + ", ".join(f"{k} {v}" for k, v in sorted(r.invalid.items())))
    if r.outlets and profile.outlets is not None:
        specs = _outlet_specs(profile, r)
        header = f"{'outlet':<10} {'name':<24} {'metric':<16} {'value':>14}  unit"
        if raw is not None:
            header += f"   raw ({raw_source})"
        lines += ["", header]
        for o in r.outlets:
            for f in OUTLET_FIELDS:
                if f not in specs:
                    continue
                v = getattr(o, f)
                shown = f"{v:>14.6g}" if v is not None else f"{'-':>14}"
                line = f"{o.index:<10} {o.name[:24]:<24} {f:<16} {shown}  {_UNITS[f]:<4}"
                if raw is not None:
                    line += f" {raw.get(_value_oid(specs[f], o.index), '(absent)')}"
                lines.append(line.rstrip())
    return "\n".join(lines)


def _detect(args: argparse.Namespace) -> int:
    cfg = load_model(CollectorConfig, args.config)
    if args.auth not in cfg.auths:
        raise ConfigError("--auth", "auth", "names no entry of auths in the config")
    auth: AuthConfig = cfg.auths[args.auth]
    profiles = site_profiles(cfg.profiles_dir)
    require_profile(profiles, args.profile, "--profile", "profile")

    try:
        pdu = PduConfig(
            name="detect", address=args.address, auth=args.auth, profile=args.profile,
            timeout=args.timeout,
        )  # fmt: skip
    except ValueError:
        raise ConfigError("ADDRESS", "address", "not HOST, HOST:PORT or [IPv6]:PORT") from None
    state, found, partial = asyncio.run(_poll_once(pdu_target(pdu, auth), profiles))
    print(_report(state, found, None, "", partial))
    return 0 if state.up else EXIT_FAILED


def _check(args: argparse.Namespace) -> int:
    from collector.pdu.responder import Responder
    from collector.pdu.snmprec import read_recording

    path = Path(args.recording)
    try:
        walk = read_recording(path)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(path, "recording", f"cannot be read ({reason})") from None
    profiles = site_profiles(args.profiles_dir)
    require_profile(profiles, args.profile, "--profile", "profile")
    community = "public"
    with Responder(walk, community) as agent:
        target = PduTarget(
            name=path.stem,
            target=Target(agent.host, agent.port, Auth(version="2c", community=community)),
            profile=args.profile,
        )
        state, found, _ = asyncio.run(_poll_once(target, profiles))
        oids: list[str] = []
        if state.reading is not None and found.profile.outlets is not None:
            specs = list(_outlet_specs(found.profile, state.reading).values())
            oids = [_value_oid(s, o.index) for o in state.reading.outlets for s in specs]
        raw = _raw_values(agent.host, agent.port, community, oids)
    source = "net-snmp snmpget"
    if raw is None:
        source = "the recording; net-snmp's snmpget is not installed"
        raw = {o: str(v.value) for o, v in walk.items()}
    print(_report(state, found, raw, source, shapes_in_walk(profiles, walk)))
    return 0 if state.up else EXIT_FAILED


def profiles_markdown(profiles: Sequence[Profile]) -> str:
    """The README section on every profile's families and required / optional columns."""
    out = []
    for p in sorted(profiles, key=lambda p: p.name):
        required, optional = p.columns_doc()
        out += [
            f"### `{p.name}`",
            "",
            f"{p.vendor}, {p.mib}. Product families (sysObjectID prefixes): "
            + ", ".join(f"`{f}`" for f in p.sys_object_ids)
            + ".",
            "",
            "Required (value columns): " + ", ".join(f"`{c}`" for c in required) + ".",
            "",
            "Optional (names, labels, decimal digits, states, conditions, identity): "
            + (", ".join(f"`{c}`" for c in optional) or "none")
            + ".",
            "",
        ]
    return "\n".join(out).rstrip() + "\n"


def _list(args: argparse.Namespace) -> int:
    profiles = site_profiles(args.profiles_dir)
    if args.markdown:
        print(profiles_markdown(profiles), end="")
        return 0
    for p in sorted(profiles, key=lambda p: p.name):
        required, optional = p.columns_doc()
        print(
            f"{p.name:<20} {p.vendor:<18} {p.mib:<20} families {', '.join(p.sys_object_ids)}; "
            f"{len(required)} required, {len(optional)} optional columns"
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the `pdu` subcommand and its commands."""
    p = sub.add_parser(
        "pdu",
        help="what wattbit makes of a PDU: detect one, check a recording, list profiles",
        description=__doc__.split("\n\n", 2)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmds = p.add_subparsers(dest="pdu_command", required=True)
    d = cmds.add_parser("detect", help="poll one PDU once and show what would be exported")
    d.add_argument("address", help="HOST, HOST:PORT or [IPv6]:PORT (UDP, default port 161)")
    d.add_argument("--config", required=True, help="the collector's YAML configuration")
    d.add_argument("--auth", required=True, help="the name of an entry of its auths")
    d.add_argument("--profile", help="use this profile instead of detecting one")
    d.add_argument("--timeout", default="3s", type=duration_arg, help="per request (default 3s)")
    d.set_defaults(func=_detect)
    c = cmds.add_parser("check", help="what a profile exports from a recording, beside net-snmp")
    c.add_argument("recording", help=".snmprec, or net-snmp `snmpwalk -On` text as .snmpwalk")
    c.add_argument("--profile", help="use this profile instead of detecting one")
    c.add_argument("--profiles-dir", help="extra profiles (e.g. one being written)")
    c.set_defaults(func=_check)
    ls = cmds.add_parser("profiles", help="list the profiles and the columns they require")
    ls.add_argument("--profiles-dir", help="extra profiles, as the collector's profiles_dir")
    ls.add_argument("--markdown", action="store_true", help="the README section, as Markdown")
    ls.set_defaults(func=_list)
