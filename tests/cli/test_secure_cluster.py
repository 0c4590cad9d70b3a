"""A secure cluster a user runs from the shell: ``cluster up`` with a ``[keyservice]`` starts
the key service beside brokers serving default, psguard, eventguard and narada; ``subscribe``
and ``publish`` with each ``--profile`` run as separate processes and the subscriber prints
exactly what the reference matcher says; a subscriber outside its policy is refused in one
line; a canary never reaches a broker's log, SQLite file or recorded frames, and the master
secret no file at all; ``cluster down`` then ``up`` keeps the secrets and the old durable
subscriptions deliver. One cluster serves the whole module, and every command but the
separate subscriber and publisher processes runs in this process (``CliRunner``): suite time."""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from pubguard.cli.main import cli
from pubguard.matching.reference import ReferenceMatcher
from pubguard.model import Event, Filter
from pubguard.net.keyservice.kdc import KdcConfig
from pubguard.net.server.pidfile import command_line, read_pidfile
from pubguard.schemes.registry import HOSPITAL

pytestmark = pytest.mark.slow

PUBGUARD = [sys.executable, "-m", "pubguard.cli.main"]
MASTER_ENV = "PUBGUARD_KEYSERVICE_MASTER"
#: a subscriber at b1 and a publisher at b2 (the other side of b0), before --profile's value
SUB = ("subscribe", "--state", "st", "--broker", "b1", "--profile")
PUB = ("publish", "--state", "st", "--broker", "b2", "--profile")
ADV = ("advertise", "--state", "st", "--broker", "b2", "--profile")
UNSUB = ("unsubscribe", "--state", "st", "--broker", "b1", "--profile")
WAIT = 60.0  # bounds a wait for a process on a loaded machine, never a result
CANARY = "canary-" + secrets.token_hex(8)
RESEARCHER_OK = 'topic = "cancerTrail" && age >= 20 && age <= 30'
OVERREACH = "age >= 0 && age <= 100"
#: each profile's subscription (eventguard: one topic constraint, eventguard.txt §3.1; narada
#: routes on the topic alone, narada-secure-delivery.txt §III)
FILTERS = {
    "default": 'topic = "cardiology" && age > 20',
    "psguard": 'topic = "cardiology" && age >= 18 && age <= 40',
    "eventguard": 'topic = "cardiology"',
    "narada": 'topic = "cardiology"',
}
#: the last age matches every profile's filter: a subscriber stops after the events the
#: reference matcher expects (--count), and an event it should not have had would take the
#: last one's place
AGES = (10, 19, 25, 41, 70, 30)
CONFIG = """\
publishers = ["cli"]
[topology]
kind = "edges"
edges = [["b0", "b1"], ["b0", "b2"]]
[broker]
profiles = ["default", "psguard", "eventguard", "narada"]
[brokers.b0]
record = true
[keyservice]
policy = "policy.json"
"""


def _events(profile: str, tag: str) -> list[dict[str, object]]:
    return [
        {
            "id": f"{profile}-{tag}-{a}",
            "type": "patient",
            "attrs": {"topic": "cardiology", "age": a, "patientRecord": f"{CANARY} {a}"},
        }
        for a in AGES
    ]


def _expected(profile: str, events: list[dict[str, object]]) -> list[str]:
    ref = ReferenceMatcher({"s": Filter.parse(FILTERS[profile])})
    return [str(e["id"]) for e in events if ref.match(Event(e["attrs"]))]  # type: ignore[arg-type]


class Net:
    def __init__(self, root: Path, env: dict[str, str | None]) -> None:
        self.root, self.env = root, env  # (None: unset while a command runs)
        self.state = root / "st"
        self.master = base64.b64decode(env.get(MASTER_ENV) or "")

    def run(self, *args: str) -> Result:
        """``pubguard ARGS`` in this process, in the cluster's folder, with its secrets."""
        cwd = os.getcwd()
        os.chdir(self.root)
        try:
            return CliRunner().invoke(cli, list(args), env=self.env)
        finally:
            os.chdir(cwd)

    def start(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*PUBGUARD, *args],
            cwd=self.root,
            env={**os.environ, **{k: v for k, v in self.env.items() if v is not None}},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def up(self) -> None:
        r = self.run("cluster", "up", "--config", "cluster.toml")
        assert r.exit_code == 0, r.output

    def subscribers(self, counts: dict[str, int]) -> dict[str, subprocess.Popen[str]]:
        """One subscriber process per profile, each once it said it subscribed."""
        procs = {p: self.start(*SUB, p, "--count", str(n), FILTERS[p]) for p, n in counts.items()}
        for p, proc in procs.items():
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert line.startswith("subscribed to"), (p, line, proc.stderr.read())
        return procs

    def publish(self, sent: dict[str, list[dict[str, object]]]) -> None:
        """One publisher process per profile, at once."""
        procs = {p: self.start(*PUB, p, *(json.dumps(e) for e in evs)) for p, evs in sent.items()}
        for p, proc in procs.items():
            out, err = proc.communicate(timeout=WAIT)
            assert proc.returncode == 0, (p, err)
            assert out.split() == [w for e in sent[p] for w in ("published", str(e["id"]))]


def _printed(proc: subprocess.Popen[str]) -> list[str]:
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0, err
    return [json.loads(line)["id"] for line in out.splitlines()]


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Net]:
    root = tmp_path_factory.mktemp("secure-cluster")
    policy = KdcConfig(
        b"\0" * 32,  # the policy file holds no secret: only its public parts are written
        (HOSPITAL,),
        subscribers={"researcher": [RESEARCHER_OK], "cli": list(FILTERS.values())},
        admins=("admin",),
    )
    policy.save_policy(root / "policy.json")
    (root / "cluster.toml").write_text('state_dir = "st"\n' + CONFIG)
    env: dict[str, str | None] = {
        MASTER_ENV: base64.b64encode(secrets.token_bytes(32)).decode(),
        "PUBGUARD_CA_PASSPHRASE": secrets.token_urlsafe(16),
        "PUBGUARD_TLS_PASSPHRASE": secrets.token_urlsafe(16),
    }
    n = Net(root, env)
    n.up()
    try:
        yield n
    finally:
        n.run("cluster", "down", "--state", "st")


def test_missing_secret_is_one_line_and_starts_nothing(tmp_path: Path) -> None:
    (tmp_path / "cluster.toml").write_text('state_dir = "st"\n' + CONFIG)
    (tmp_path / "policy.json").write_text("{}")
    net = Net(tmp_path, {MASTER_ENV: None})
    r = net.run("cluster", "up", "--config", "cluster.toml")
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1 and MASTER_ENV in r.stderr, r.stderr
    assert r.stdout == ""
    assert not (tmp_path / "st").exists()  # nothing was started, nothing written


def test_status_shows_the_key_service(net: Net) -> None:
    r = net.run("cluster", "status", "--state", "st", "--json")
    assert r.exit_code == 0, r.output
    ks = json.loads(r.stdout.splitlines()[0])["keyservice"]
    assert ks["profiles"] == ["default", "psguard", "eventguard", "narada"]
    assert ks["ops"] > 0 and "down" not in ks and "error" not in ks


def test_each_profile_delivers_what_the_reference_matcher_says(net: Net) -> None:
    sent = {p: _events(p, "live") for p in FILTERS}
    subs = net.subscribers({p: len(_expected(p, evs)) for p, evs in sent.items()})
    net.publish(sent)
    for p, proc in subs.items():
        got = _printed(proc)
        assert got == _expected(p, sent[p]), p
        assert got  # the workload matches something in every profile


def test_subscriber_outside_its_policy_is_refused_in_one_line(net: Net) -> None:
    r = net.run("identity", "issue", "researcher", "--role", "subscriber", "--state", "st")
    assert r.exit_code == 0, r.output
    r = net.run(*SUB, "default", "--identity", "researcher", "--count", "1", OVERREACH)
    assert r.exit_code == 1
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(
        f"pubguard: error: key service refused filter '{OVERREACH}' for identity 'researcher'"
    ), r.stderr


def test_an_ambiguous_profile_and_a_narada_topic_outside_policy_are_one_line_each(
    net: Net,
) -> None:
    r = net.run("subscribe", "--state", "st", "--broker", "b1", 'topic = "x"')
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
    assert "choose one with --profile" in r.stderr, r.stderr
    # the KMC's rights follow the policy: researcher may subscribe to cancerTrail only (and,
    # under this open publisher policy, publish anywhere)
    r = net.run(*SUB, "narada", "--identity", "researcher", "--count", "1", 'topic = "cardiology"')
    assert r.exit_code == 1 and r.stderr.count("\n") == 1, r.output
    assert "the KMC grants 'researcher' no subscribe right on 'cardiology'" in r.stderr, r.stderr


def test_advertise_and_unsubscribe_speak_the_profiles_too(net: Net) -> None:
    r = net.run(*ADV, "eventguard", 'topic = "cardiology"')
    assert r.exit_code == 0 and r.stdout.startswith("advertised "), r.output

    def subs_at_b1() -> int:
        r = net.run("status", "--state", "st", "--json")
        return int(json.loads(r.stdout.splitlines()[0])["b1"]["subscriptions"])

    durable = ("--durable", "--sub-id", "gone")
    r = net.run(*SUB, "default", *durable, "--timeout", "0.1", FILTERS["default"])
    assert r.exit_code == 0, r.output
    before = subs_at_b1()
    r = net.run(*UNSUB, "default", "--sub-id", "gone", FILTERS["default"])
    assert r.exit_code == 0 and r.stdout.strip() == "unsubscribed gone at b1", r.output
    assert subs_at_b1() == before - 1


def test_a_killed_key_service_is_shown_down_and_started_again_by_up(net: Net) -> None:
    pid = read_pidfile(net.state / "keyservice")
    assert pid is not None
    os.kill(pid.pid, signal.SIGKILL)
    deadline = time.monotonic() + WAIT
    while command_line(pid.pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    r = net.run("cluster", "status", "--state", "st", "--json")
    assert json.loads(r.stdout.splitlines()[0])["keyservice"].get("down") is True, r.output
    r = net.run("cluster", "up", "--config", "cluster.toml")
    assert r.exit_code == 0 and "restarted the key service" in r.stdout, r.output
    r = net.run("cluster", "status", "--state", "st", "--json")
    ks = json.loads(r.stdout.splitlines()[0])["keyservice"]
    assert "down" not in ks and "error" not in ks, ks


def test_canary_and_master_stay_out_of_logs_databases_and_frames(net: Net) -> None:
    # runs after the publications above (module order): every profile has carried the canary
    seen = list(net.state.rglob("*"))
    assert any(p.name == "seen.msgpack" for p in seen)  # b0's captured frames
    assert any(p.suffix == ".db" for p in seen)
    passphrases = [
        str(net.env[k]).encode() for k in ("PUBGUARD_CA_PASSPHRASE", "PUBGUARD_TLS_PASSPHRASE")
    ]
    needles = (CANARY.encode(), net.master, base64.b64encode(net.master), *passphrases)
    for p in seen:
        if not p.is_file():
            continue
        data = p.read_bytes()
        for n in needles:
            assert n not in data, f"{n[:12]!r}... found in {p.relative_to(net.root)}"


def test_down_and_up_keep_secrets_and_durable_subscriptions(net: Net) -> None:
    keys = net.state / "pki" / "broker-keys.json"
    for p in FILTERS:
        durable = ("--durable", "--sub-id", f"keep-{p}")
        r = net.run(*SUB, p, *durable, "--timeout", "0.1", FILTERS[p])
        assert r.exit_code == 0 and r.stdout == "", (p, r.output)
    before = json.loads(keys.read_text())
    r = net.run("cluster", "down", "--state", "st")
    assert r.exit_code == 0 and "and the key service" in r.stdout, r.output
    net.up()
    after = json.loads(keys.read_text())
    for k in ("authority_key", "ms_key", "publishers", "ca_cert", "kmc_certs"):
        assert after[k] == before[k], k
    sent = {p: _events(p, "after") for p in FILTERS}
    for p, evs in sent.items():  # while the durable subscribers are away
        r = net.run(*PUB, p, *(json.dumps(e) for e in evs))
        assert r.exit_code == 0, (p, r.output)
    for p in FILTERS:
        durable = ("--durable", "--sub-id", f"keep-{p}")
        r = net.run(*SUB, p, *durable, "--count", str(len(_expected(p, sent[p]))), FILTERS[p])
        assert r.exit_code == 0, (p, r.output)
        got = [json.loads(line)["id"] for line in r.stdout.splitlines()]
        assert got == _expected(p, sent[p]), p
