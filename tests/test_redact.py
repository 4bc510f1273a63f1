"""Redaction: every kind of secret the hooks capture is masked and the text around it kept, and hostile
text (a batch script is whatever its user wrote) costs time linear in its size."""
from __future__ import annotations

import signal
import time

import pytest

from observe import redact
from test_slurm_hooks import SECRETS, _parts

MB = 1 << 20
HOSTILE = ["-", "a", "A1", "=", "TOKEN", "TOKEN=", "--token ", "-" * 1000 + "x", "eyJ-", "a.", "+a", "Aa1+", "a://b:",
           '"', 'TOKEN="', '"token":"\\', "mysql ", "curl -u a:", "sshpass -e ", "-----BEGIN A", "_PW", "token\t"]
ORDINARY = "#!/bin/bash\n#SBATCH --nodes=4\nexport PATH=/usr/bin:$PATH\nsrun python train.py --lr 3e-4 --epochs 90\n"


def _timed(value: str, limit: float) -> float:
    """Seconds redact.text takes on ``value``; fails once it passes ``limit`` (re checks signals as it runs)."""
    def expire(signum, frame):
        raise TimeoutError
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    started = time.perf_counter()
    try:
        redact.text(value)
    except TimeoutError:
        pytest.fail(f"redact.text took over {limit:.1f}s on {len(value)} characters of {value[:12]!r}...")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return time.perf_counter() - started


@pytest.fixture(scope="module")
def limit() -> float:
    """The bound: 4 times what a megabyte of an ordinary script takes on this machine, at least 1s."""
    return max(1.0, 4 * _timed(ORDINARY * (MB // len(ORDINARY)), 30))


@pytest.mark.parametrize("seed", HOSTILE)
def test_hostile_text_takes_linear_time(seed: str, limit: float) -> None:
    """A megabyte of one repeated piece, led or followed by a stray character, takes about what a
    megabyte of an ordinary script does: with a pattern that backtracks it takes hours."""
    run = seed * (MB // len(seed))
    for value in ("x" + run, run + "x"):
        assert _timed(value, limit) < limit


@pytest.mark.parametrize("line, secret, kept", [
    ('{"token": "abc123XYZ", "step": 4}', "abc123XYZ", ['{"token": "', '", "step": 4}']),
    ('{"password":"hunter2","user":"ada"}', "hunter2", ['{"password":"', '","user":"ada"}']),
    ('{"api_key": "a\\"b-tail"}', "b-tail", ['{"api_key": "']),
    ("export DB_PWD=hunter2 && run", "hunter2", ["export DB_PWD=", " && run"]),
    ("MYSQL_PASS='s3cret pass' ./load.sh", "s3cret", ["MYSQL_PASS='", "' ./load.sh"]),
    ("LDAP_PW=pw0rd1 ldapsearch -x", "pw0rd1", ["LDAP_PW=", " ldapsearch -x"]),
    ("mysql -pSECRET1 runs", "SECRET1", ["mysql -p", " runs"]),
    ("mysql -u root -pSECRET2 db < dump.sql", "SECRET2", ["mysql -u root -p", " db < dump.sql"]),
    ("/usr/bin/mysqldump -h db -u root -p'se cret' runs", "se cret", ["mysqldump -h db -u root -p", " runs"]),
    ("sshpass -p SECRET3 ssh user@host", "SECRET3", ["sshpass -p ", " ssh user@host"]),
    ("sshpass -pSECRET4 scp a host:b", "SECRET4", ["sshpass -p", " scp a host:b"]),
    ("sshpass -e -p SECRET5 ssh host", "SECRET5", ["sshpass -e -p ", " ssh host"]),
    ("curl -u alice:SECRET6 https://api.example.com", "SECRET6", ["curl -u alice:", " https://api.example.com"]),
    ("curl -sS --user alice:SECRET7 -X POST x", "SECRET7", ["curl -sS --user alice:", " -X POST x"]),
    ("curl --user=alice:SECRET8 x", "SECRET8", ["curl --user=alice:", " x"]),
    ("python train.py --wandb-key abc --lr 3e-4", "abc", ["python train.py --wandb-key ", " --lr 3e-4"]),
    ("git clone https://bob:S3cretPw@git.example.com/r.git", "S3cretPw", ["https://bob:", "@git.example.com/r.git"]),
])
def test_each_form_masks_the_secret_and_keeps_the_text(line: str, secret: str, kept: list[str]) -> None:
    out = redact.text(line)
    assert secret not in out and redact.MASK in out, out
    assert all(part in out for part in kept), out


@pytest.mark.parametrize("line", [
    "PWD=/home/ada OLDPWD=/tmp",  # the working directory, not a password
    "mysql -p runs",  # -p alone: mysql prompts for the password
    "sshpass -f pwfile ssh -p 2222 host",  # ssh's port, after sshpass's own options
    "curl --user-agent 'probe:1' https://x",
    "the key is to shard the dataset",  # prose: no option dashes, no = or :
    "srun --nodes=4 python train.py --lr 3e-4 /scratch/ada/runs/llama/ckpt",
])
def test_ordinary_text_is_kept(line: str) -> None:
    assert redact.text(line) == line


def test_every_kind_the_hooks_capture_is_masked() -> None:
    """The 20 kinds of secrets of the hooks test (tests/test_slurm_hooks.py), without Slurm: exported
    by a batch script, passed on command lines, and in the environment the epilog gets."""
    def quoted(v: str) -> str:
        return "'" + v.replace("'", "'\\''") + "'"
    script = redact.text("#!/bin/sh\n" + "".join(f"export {k}={quoted(v)}\n" for k, v in SECRETS.items())
                         + f"python train.py --db-password {quoted(SECRETS['DB_PASSWORD'])} "
                         f"--hub-token {SECRETS['HF_HOME_TOK']}\ncurl -H 'Authorization: Bearer {SECRETS['SESSION_JWT']}' x\n")
    env = redact.env({"PWD": "/", "SLURM_JOB_ID": "7", **SECRETS})
    assert script.count(redact.MASK) >= 20 and "export AWS_ACCESS_KEY_ID=" in script
    assert env["PWD"] == "/" and env["SLURM_JOB_ID"] == "7" and all(redact.MASK in env[k] for k in SECRETS)
    everything = script + "\n".join(env.values())
    assert not {k for k, v in SECRETS.items() if any(p in everything for p in _parts(v))}


@pytest.mark.parametrize("name", sorted(set(SECRETS) - {"DB_PASSWORD"}))  # a pass phrase is only known by its name
def test_a_credential_is_masked_by_its_shape_alone(name: str) -> None:
    """Under a name that says nothing, in a log line, each credential is still masked by what it looks like."""
    out = redact.text(f"step 4: using {SECRETS[name]} now")
    assert not [p for p in _parts(SECRETS[name]) if p in out] and out.startswith("step 4: using "), out
