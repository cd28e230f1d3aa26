"""The lab token: generated once, read from the environment or a file, never a guessable one."""

import os
import subprocess
import sys
import threading

import pytest

from stormcore import auth
from stormcore.errors import LabError


@pytest.mark.parametrize("token", ["", "stormlab-training-token", "short", "CHANGEME"])
def test_a_guessable_token_is_refused(monkeypatch, token):
    monkeypatch.setenv(auth.ENV, token)
    monkeypatch.delenv(auth.FILE_ENV, raising=False)
    with pytest.raises(auth.WeakToken):
        auth.from_env()


def test_the_token_comes_from_the_environment_else_its_file(monkeypatch, tmp_path):
    made = auth.init(tmp_path / "secrets")
    assert made == ["token", "grafana-password"]
    assert auth.init(tmp_path / "secrets") == []  # kept across restarts
    token = (tmp_path / "secrets" / "token").read_text().strip()
    assert len(token) >= 24
    monkeypatch.delenv(auth.ENV, raising=False)
    monkeypatch.setenv(auth.FILE_ENV, str(tmp_path / "secrets" / "token"))
    assert auth.from_env() == token
    monkeypatch.setenv(auth.ENV, "x" * 20)
    assert auth.from_env() == "x" * 20
    monkeypatch.setenv("STORMLAB_GRAFANA_PASSWORD_FILE", str(tmp_path / "secrets" / "grafana-password"))
    monkeypatch.delenv("STORMLAB_GRAFANA_PASSWORD", raising=False)
    monkeypatch.delenv("STORMLAB_GRAFANA_TOKEN", raising=False)
    assert auth.grafana_auth().startswith("Basic ")


def test_a_service_does_not_start_with_the_old_published_token(tmp_path):
    env = {**os.environ, auth.ENV: "stormlab-training-token", "STORMLAB_PORT": "0"}
    done = subprocess.run([sys.executable, "-m", "metadata_service"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "too easy to guess" in done.stderr


def test_a_client_uses_the_stacks_token_file_rather_than_making_its_own(monkeypatch, tmp_path):
    auth.init(tmp_path / "secrets")
    monkeypatch.setenv(auth.ENV, "")  # compose passes an empty STORMLAB_TOKEN when none is chosen
    monkeypatch.setenv(auth.FILE_ENV, str(tmp_path / "secrets" / "token"))
    assert auth.ensure_token(tmp_path / "state") == (tmp_path / "secrets" / "token").read_text().strip()
    assert not (tmp_path / "state" / ".env").exists()


def test_a_first_start_writes_the_token_0600_and_never_appends_to_a_file_it_did_not_write(tmp_path, monkeypatch):
    monkeypatch.delenv("STORMLAB_TOKEN", raising=False)
    monkeypatch.delenv("STORMLAB_TOKEN_FILE", raising=False)
    token = auth.ensure_token(tmp_path)
    env = tmp_path / ".env"
    assert env.stat().st_mode & 0o777 == 0o600 and env.read_text() == f"STORMLAB_TOKEN={token}\n"
    assert auth.ensure_token(tmp_path) == token and [p.name for p in tmp_path.iterdir()] == [".env"]  # no temporary left
    other = tmp_path / "other"
    other.mkdir()
    (other / ".env").write_text("PROMETHEUS_PORT=9090\n")
    (other / ".env").chmod(0o644)
    with pytest.raises(LabError, match="has no STORMLAB_TOKEN= line"):
        auth.ensure_token(other)
    assert (other / ".env").read_text() == "PROMETHEUS_PORT=9090\n"


def test_two_first_starts_agree_on_one_token(tmp_path):
    path = tmp_path / ".env"
    first = auth.write_new_token(path)
    assert auth.write_new_token(path) == first  # the loser reads the winner's
    assert path.read_text() == f"STORMLAB_TOKEN={first}\n"


def test_the_stacks_token_is_readable_by_the_labs_group_only_and_an_old_one_is_mended(tmp_path):
    secrets_dir = tmp_path / "secrets"
    auth.init(secrets_dir, group=os.getgid())
    token, password = secrets_dir / "token", secrets_dir / "grafana-password"
    assert token.stat().st_mode & 0o777 == 0o640  # never "other": Grafana (another uid) mounts the volume
    assert password.stat().st_mode & 0o777 == 0o644  # Grafana's own password, which it must read
    assert token.stat().st_gid == os.getgid()
    token.chmod(0o644)  # a volume from before: world-readable
    assert auth.init(secrets_dir, group=os.getgid()) == [] and token.stat().st_mode & 0o777 == 0o640


def test_first_starts_at_the_same_moment_all_agree_and_none_is_told_the_file_has_no_token(tmp_path, monkeypatch):
    """Seen here: two commands started together, one read .env as absent, the other created it,
    and the first was told ".env has no STORMLAB_TOKEN= line" (and to remove the file of a lab
    started with that token). Threads switching every microsecond put the two at every point of it."""
    monkeypatch.delenv("STORMLAB_TOKEN", raising=False)
    monkeypatch.delenv("STORMLAB_TOKEN_FILE", raising=False)
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    failures, rounds = [], 200
    try:
        for n in range(rounds):
            where, said = tmp_path / f"lab-{n}", []
            start = threading.Barrier(3)

            def first_start(where=where, said=said, start=start) -> None:
                start.wait()
                try:
                    said.append(auth.ensure_token(where))
                except LabError as exc:
                    failures.append(str(exc))

            threads = [threading.Thread(target=first_start) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(set(said)) <= 1
    finally:
        sys.setswitchinterval(before)
    assert failures == []
