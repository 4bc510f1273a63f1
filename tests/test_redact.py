"""Redaction: every kind of secret the hooks capture is masked and the text around it kept, an ordinary
training script comes through unchanged, and hostile text (a batch script is whatever its user wrote)
costs time linear in its size."""
from __future__ import annotations

import json
import signal
import time
import tomllib
from pathlib import Path

import pytest

from observe import redact
from test_slurm_hooks import SECRETS, _parts

MB = 1 << 20
CLEAN = Path(__file__).parent / "fixtures" / "redact" / "clean_sbatch.sh"
# the piece each pattern of redact.toml could rescan or backtrack over, repeated
HOSTILE = ["-", "a", "A1", "=", "TOKEN", "TOKEN=", "--token ", "-" * 1000 + "x", "eyJ-", "a.", "+a", "Aa1+", "a://b:",
           '"', 'TOKEN="', '"token":"\\', "mysql ", "curl -u a:", "sshpass -e ", "-----BEGIN A", "_PW", "token\t",
           "mysql-", "mysql -p", "mongo ", "docker login ", "podman registry login -u ", "redis-cli ", "ldapsearch ",
           "-w ", "machine ", "machine a login ", "default login ", "login ", "password ", "'", "'PASS=", "+ export 'TOKEN=",
           "--token \\\n", " \\\n", "Authorization: Bearer ", "aws_session_token ", "-passin pass:",
           "-----BEGIN PGP PRIVATE KEY BLOCK", "GR1348941", "dckr_pat_", "lsv2_pt_", "api_org_", "xapp-",
           # the shell words, YAML blocks, headers and command options added for a batch script's other forms
           'PW="', "PW='", "PW=$'", 'PW="""', "PW=a\\", 'PW=a"', "PW=a'b", 'x["PW"] = ', "PW+=", "'PW' => ",
           "password:\n ", "password: |\n  x\n", "Authorization: x ", "a://b:@", "@", "a:1:", "a:1:b:c:",
           "openssl ", "zip ", "7z ", "smbclient -U a", "lftp -u a", "sqlcmd ", "ssh-keygen ", "mc alias set ",
           "rclone config create ", "rclone config create a b token "]
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
    """A megabyte of one repeated piece, between two stray characters, takes about what a megabyte of
    an ordinary script does: with a pattern that backtracks or rescans it takes hours."""
    assert _timed("x" + seed * (MB // len(seed)) + "x", limit) < limit


# (line, secret, the text around it that stays); the inventory each form comes from is in redact.toml
FORMS = [
    # secret-named variables in shell, JSON and set -x traces
    ('{"token": "abc123XYZ", "step": 4}', "abc123XYZ", ['{"token": "', '", "step": 4}']),
    ('{"password":"hunter2","user":"ada"}', "hunter2", ['{"password":"', '","user":"ada"}']),
    ('{"api_key": "a\\"b-tail"}', "b-tail", ['{"api_key": "']),
    ("{'token': 'abc123', 'lr': 3}", "abc123", ["{'token': '", "', 'lr': 3}"]),
    ("export DB_PWD=hunter2 && run", "hunter2", ["export DB_PWD=", " && run"]),
    ("MYSQL_PASS='s3cret pass' ./load.sh", "s3cret", ["MYSQL_PASS='", "' ./load.sh"]),
    ("LDAP_PW=pw0rd1 ldapsearch -x", "pw0rd1", ["LDAP_PW=", " ldapsearch -x"]),
    ("export X_PASSWORD=Hunter2Pass", "Hunter2Pass", ["export X_PASSWORD="]),
    ("export PASS=plainpw77", "plainpw77", ["export PASS="]),
    ("PASS=plainpw88 ./run.sh", "plainpw88", ["PASS=", " ./run.sh"]),
    ('TOKEN="tok en 123" srun x', "tok en", ['TOKEN="', '" srun x']),
    ("export SECRET='s3 cr3t'", "s3 cr3t", ["export SECRET='", "'"]),
    ("export API_KEY=abcdef123", "abcdef123", ["export API_KEY="]),
    ("export WANDB_API_KEY=local-0123456789abcdef", "0123456789abcdef", ["export WANDB_API_KEY="]),
    ("+ export MY_TOKEN=tracedtok99", "tracedtok99", ["+ export MY_TOKEN="]),
    ("++ PASS=tracedpw11", "tracedpw11", ["++ PASS="]),
    ("+ export 'PASS=traced pw 12'", "traced pw", ["+ export 'PASS=", "'"]),
    ("export GPG_PASSPHRASE=phrase123 x", "phrase123", ["export GPG_PASSPHRASE=", " x"]),
    ("export AZURE_CREDENTIAL=cred1234 x", "cred1234", ["export AZURE_CREDENTIAL=", " x"]),
    ("export DB_CREDS=ada:creds567 x", "creds567", ["export DB_CREDS=", " x"]),
    ("curl --cookie sid=cookie890 x", "cookie890", ["curl --cookie ", " x"]),
    ("export JUPYTER_SESSION_ID=sess1234 x", "sess1234", ["export JUPYTER_SESSION_ID=", " x"]),
    ("export DEPLOY_PRIVATE=priv5678 x", "priv5678", ["export DEPLOY_PRIVATE=", " x"]),
    ("curl -H 'X-Hub-Signature: sha256=sig9012' x", "sig9012", ["curl -H 'X-Hub-Signature: ", "' x"]),
    ("export SENTRY_DSN=https://dsn3456@o1.ingest.sentry.io/1 x", "dsn3456", ["export SENTRY_DSN=", " x"]),
    ("export MONGO_CONNSTR=mongodb+srv://conn7890.example.net x", "conn7890", ["export MONGO_CONNSTR=", " x"]),
    ("export TEAMS_WEBHOOK=https://x.webhook.office.com/hook1234 x", "hook1234", ["export TEAMS_WEBHOOK=", " x"]),
    ("SSHPASS=sshpw123 sshpass -e ssh h", "sshpw123", ["SSHPASS=", " sshpass -e ssh h"]),
    ("export LDAP_BINDPW=bindpw234 BINDPW=bindpw345 x", "bindpw", ["export LDAP_BINDPW=", " BINDPW=", " x"]),
    ("export GH_PAT=ghpat456 DOCKER_PAT=dockpat567 x", "pat", ["export GH_PAT=", " DOCKER_PAT=", " x"]),
    ("export BEARER=bearer678 x", "bearer678", ["export BEARER=", " x"]),
    # a subscript, other languages' assignments, and a shell word's every piece
    ('os.environ["DB_PASSWORD"] = "envpw123"', "envpw123", ['os.environ["DB_PASSWORD"] = "', '"']),
    ("cfg['api_key'] = 'cfgkey234'; run(cfg)", "cfgkey234", ["cfg['api_key'] = '", "'; run(cfg)"]),
    ("my %c = ('password' => 'perlpw345', 'user' => 'ada');", "perlpw345", ["('password' => '", "', 'user' => 'ada');"]),
    ("password := gopw456\nuser := ada", "gopw456", ["password := ", "\nuser := ada"]),
    ("PASSWORD+=appendpw567 x", "appendpw567", ["PASSWORD+=", " x"]),
    ('password = """tomlpw678"""\nuser = "ada"', "tomlpw678", ['password = "', '"\nuser = "ada"']),
    ("password = '''\ntomlpw789\n'''\nuser = 1", "tomlpw789", ["password = '", "'\nuser = 1"]),
    ("export DB_PASSWORD=$'ansi pw890' x", "pw890", ["export DB_PASSWORD=$'", "' x"]),
    ('export DB_PASSWORD=ab"cd ef901" x', "ef901", ["export DB_PASSWORD=", " x"]),
    ("export DB_PASSWORD=esc\\ pw012 x", "pw012", ["export DB_PASSWORD=", " x"]),
    ('export DB_PASSWORD="multi\nline123"\nsrun x', "line123", ['export DB_PASSWORD="', '"\nsrun x']),
    ('+ export "DB_PASSWORD=dq pw345" x', "pw345", ['+ export "DB_PASSWORD=', '" x']),
    # YAML written by a heredoc: the value on the lines below its key
    ("cat > c.yaml <<EOF\ndb:\n  password:\n    yamlpw456\n  user: ada\nEOF", "yamlpw456",
     ["db:\n  password:\n    ", "\n  user: ada\nEOF"]),
    ("cat > c.yaml <<EOF\n- token: |\n    yamlpw567\n    more678\nname: x\nEOF", "more678",
     ["- token: |\n    ", "\nname: x\nEOF"]),
    # command-line options
    ("python train.py --wandb-key abc --lr 3e-4", "abc", ["python train.py --wandb-key ", " --lr 3e-4"]),
    ("python load.py --password pw12345 --lr 1", "pw12345", ["python load.py --password ", " --lr 1"]),
    ("python load.py --password=pw23456 x", "pw23456", ["python load.py --password=", " x"]),
    ("hfcli upload --token plaintok678 model", "plaintok678", ["hfcli upload --token ", " model"]),
    ("python x.py --token \\\n  plaintok789 --lr 1", "plaintok789", ["python x.py --token \\\n  ", " --lr 1"]),
    ("docker login -u bob -p dockpw345 registry.example.com", "dockpw345", ["docker login -u bob -p ", " registry.example.com"]),
    ("docker login --username bob --password dockpw456 reg.io", "dockpw456", ["--username bob --password ", " reg.io"]),
    ("podman login -pdockpw567 quay.io", "dockpw567", ["podman login -p", " quay.io"]),
    ("mysql -pSECRET1 runs", "SECRET1", ["mysql -p", " runs"]),
    ("mysql -u root -pSECRET2 db < dump.sql", "SECRET2", ["mysql -u root -p", " db < dump.sql"]),
    ("/usr/bin/mysqldump -h db -u root -p'se cret' runs", "se cret", ["mysqldump -h db -u root -p", " runs"]),
    ("mysql -u root -p mysqlpw567 db", "mysqlpw567", ["mysql -u root -p ", " db"]),
    ("mongosh -u ada -p mongopw678 mongodb://db", "mongopw678", ["mongosh -u ada -p ", " mongodb://db"]),
    ("redis-cli -h r -a redispw123 ping", "redispw123", ["redis-cli -h r -a ", " ping"]),
    ("ldapsearch -x -D cn=admin -w ldappw234 -H ldap://h", "ldappw234", ["-D cn=admin -w ", " -H ldap://h"]),
    ("sshpass -p SECRET3 ssh user@host", "SECRET3", ["sshpass -p ", " ssh user@host"]),
    ("sshpass -pSECRET4 scp a host:b", "SECRET4", ["sshpass -p", " scp a host:b"]),
    ("sshpass -e -p SECRET5 ssh host", "SECRET5", ["sshpass -e -p ", " ssh host"]),
    ("curl -u alice:SECRET6 https://api.example.com", "SECRET6", ["curl -u alice:", " https://api.example.com"]),
    ("curl -sS --user alice:SECRET7 -X POST x", "SECRET7", ["curl -sS --user alice:", " -X POST x"]),
    ("curl --user=alice:SECRET8 x", "SECRET8", ["curl --user=alice:", " x"]),
    ("openssl pkcs12 -passin pass:sslpw345 -in k.p12", "sslpw345", ["openssl pkcs12 -passin pass:", " -in k.p12"]),
    ("aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPx/RfiCYEXAMPLEKEY", "wJalrXUtnFEMI",
     ["aws configure set aws_secret_access_key "]),
    # and written to ~/.aws/credentials: the mask covers the value, never the `=` before it
    ("cat > ~/.aws/credentials <<EOF\n[default]\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPx/RfiCYEXAMPLEKEY\nEOF",
     "wJalrXUtnFEMI", ["[default]\naws_secret_access_key = ", "\nEOF"]),
    ("openssl enc -aes-256-cbc -k sslpw456 -in a -out b", "sslpw456", ["openssl enc -aes-256-cbc -k ", " -in a -out b"]),
    ("zip -r -P zippw567 out.zip data", "zippw567", ["zip -r -P ", " out.zip data"]),
    ("unzip -P zippw678 out.zip", "zippw678", ["unzip -P ", " out.zip"]),
    ("7z a -p7zpw789 out.7z data", "7zpw789", ["7z a -p", " out.7z data"]),
    ("smbclient //srv/share -U 'DOM\\alice%smbpw890' -c ls", "smbpw890", ["smbclient //srv/share -U 'DOM\\alice%", "' -c ls"]),
    ("lftp -u alice,lftppw901 sftp://host", "lftppw901", ["lftp -u alice,", " sftp://host"]),
    ("sqlcmd -S srv -U sa -P sqlpw012 -Q 'select 1'", "sqlpw012", ["sqlcmd -S srv -U sa -P ", " -Q 'select 1'"]),
    ("ssh-keygen -t ed25519 -N keygenpw123 -f k", "keygenpw123", ["ssh-keygen -t ed25519 -N ", " -f k"]),
    ("mc alias set s3 https://s3.example.com AKEXAMPLE mcsecret234 --api S3v4", "mcsecret234",
     ["mc alias set s3 https://s3.example.com AKEXAMPLE ", " --api S3v4"]),
    ("rclone config create r s3 access_key_id AK secret_access_key rclonepw345 region x", "rclonepw345",
     ["rclone config create r s3 access_key_id AK secret_access_key "]),
    ("echo 'db.example.com:5432:*:alice:pgpasspw456' > ~/.pgpass", "pgpasspw456",
     ["echo 'db.example.com:5432:*:alice:", "' > ~/.pgpass"]),
    # .netrc, URLs, HTTP headers, PEM blocks
    ("machine api.example.com login bob password netrcpw789", "netrcpw789", ["machine api.example.com login bob password "]),
    ("echo 'machine h login u password netrcpw890' >> ~/.netrc", "netrcpw890", ["echo 'machine h login u password ", "' >> ~/.netrc"]),
    ("machine h\n  login u\n  password netrcpw901\nmachine g", "netrcpw901", ["machine h\n  login u\n  password ", "\nmachine g"]),
    ("git clone https://bob:S3cretPw@git.example.com/r.git", "S3cretPw", ["https://bob:", "@git.example.com/r.git"]),
    ("psql postgresql://trainer:pgpw123@db:5432/runs", "pgpw123", ["postgresql://trainer:", "@db:5432/runs"]),
    ("git clone https://alice:hunter2@urlpw567@git.example.com/r", "urlpw567", ["https://alice:", "@git.example.com/r"]),
    ("redis-cli -u redis://:redispw678@cache:6379/0 ping", "redispw678", ["redis://:", "@cache:6379/0 ping"]),
    ("curl -H 'Authorization: Bearer plainbear' https://x", "plainbear", ["curl -H 'Authorization: Bearer ", "' https://x"]),
    ('curl -H "Authorization: Basic dXNlcjpwYXNzd29yZA==" x', "dXNlcjpwYXNzd29yZA==", ['-H "Authorization: Basic ', '" x']),
    ("curl -H 'Authorization: token ghx42' x", "ghx42", ["curl -H 'Authorization: token ", "' x"]),
    ("curl -H 'X-API-Key: apikey777' x", "apikey777", ["curl -H 'X-API-Key: ", "' x"]),
    ("curl -H 'Authorization: Api-Token apitok888' x", "apitok888", ["curl -H 'Authorization: Api-Token ", "' x"]),
    ('curl -H "Authorization: Splunk 1a2b3c4d-1a2b-3c4d-5e6f-1a2b3c4d5e6f" x', "1a2b3c4d-1a2b",
     ['curl -H "Authorization: Splunk ', '" x']),
    ("curl -H 'Authorization: SSWS oktatok999' x", "oktatok999", ["curl -H 'Authorization: SSWS ", "' x"]),
    ("curl -H 'Proxy-Authorization: ApiKey proxytok111' x", "proxytok111", ["curl -H 'Proxy-Authorization: ApiKey ", "' x"]),
    # under another name only the known schemes are kept
    ("curl -H 'X-Auth: Bearer xauth111' x", "xauth111", ["curl -H 'X-Auth: Bearer ", "' x"]),
    ("curl -H 'X-Auth: Basic xauth222' x", "xauth222", ["curl -H 'X-Auth: Basic ", "' x"]),
    ("curl -H 'X-Auth: Token xauth333' x", "xauth333", ["curl -H 'X-Auth: Token ", "' x"]),
    ("curl -H 'X-Auth: Api-Token xauth444' x", "xauth444", ["curl -H 'X-Auth: Api-Token ", "' x"]),
    ("retrying with bearer abcdefghijklmnop123 now", "abcdefghijklmnop123", ["retrying with bearer ", " now"]),
    ("cat > k <<EOF\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx\n-----END RSA PRIVATE KEY-----\nEOF",
     "MIIEpAIBAAKCAQEAx", ["cat > k <<EOF\n", "\nEOF"]),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBGRk\n-----END PGP PRIVATE KEY BLOCK-----\nok", "lQOYBGRk", ["\nok"]),
    # token shapes, wherever they appear
    ("aws configure set aws_access_key_id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", ["aws configure set aws_access_key_id "]),
    ("echo ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A", ["echo "]),
    ("git clone https://ghp_Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789@github.com/o/r", "Ab3dEfGh1jKlMn0pQrStUvWxYz",
     ["git clone https://", "@github.com/o/r"]),
    ("echo gho_Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789 ghs_Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789", "Ab3dEfGh1jKl", ["echo "]),
    ("echo github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz", "11ABCDEFG0abcdefghijkl", ["echo "]),
    ("echo glpat-xYz12345AbCdEfGhIjKl", "xYz12345AbCdEfGhIjKl", ["echo "]),
    ("echo glrt-xYz12345AbCdEfGhIjKl", "xYz12345AbCdEfGhIjKl", ["echo "]),
    ("notify xoxp-123456789012-1234567890123-abc", "123456789012-1234567890123", ["notify "]),
    ("notify xapp-1-A0123456789-0123456789-abcdef", "A0123456789-0123456789", ["notify "]),
    ("huggingface-cli login --token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "AbCdEfGhIjKlMnOpQrStUvWxYz",
     ["huggingface-cli login --token "]),
    ("echo hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567 x", "AbCdEfGhIjKlMnOpQrStUvWxYz", ["echo ", " x"]),
    ("echo sk-proj-Abcdefghijklmnop1234567890QRSTUVWX x", "Abcdefghijklmnop1234567890", ["echo ", " x"]),
    ("echo sk-Abcdefghijklmnop1234567890QRSTUVWX x", "Abcdefghijklmnop1234567890", ["echo ", " x"]),
    ("wandb login 0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567", ["wandb login "]),
    ("echo AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q x", "SyA1b2C3d4E5f6G7h8I9j0", ["echo ", " x"]),
    ("echo sk_live_51AbCdEfGhIjKlMnOpQrStUv x", "51AbCdEfGhIjKlMnOpQrStUv", ["echo ", " x"]),
    ("echo eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U x",
     "dozjgNryP4J3jVmNHl0w5N", ["echo ", " x"]),
    ("echo dckr_pat_AbCdEfGhIjKlMnOpQrStUvWxYz0 x", "AbCdEfGhIjKlMnOpQrStUvWxYz0", ["echo ", " x"]),
    ("echo dapi0123456789abcdef0123456789abcdef x", "0123456789abcdef0123456789abcdef", ["echo ", " x"]),
    ("echo AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY x", "9tSrke72PouQMnMX", ["echo ", " x"]),
    ("echo ya29.a0AfH6SMBx-abcdEFGH_ijkl1234 x", "a0AfH6SMBx-abcdEFGH", ["echo ", " x"]),
    ("echo npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 x", "AbCdEfGhIjKlMnOpQrStUvWxYz", ["echo ", " x"]),
    ("twine upload -p pypi-AgEIcHlwaS5vcmcCJGI1YjU5ZmQ0LTYyN2MtNDFlNi05ZmNhLWQ0ZDljYjFhYmY5ZgACKlsz dist/*",
     "AgEIcHlwaS5vcmcCJGI1YjU5", ["twine upload -p ", " dist/*"]),
    ("echo gsk_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKlMnOp x", "AbCdEfGhIjKlMnOpQrStUvWxYz", ["echo ", " x"]),
    ("echo r8_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789a x", "AbCdEfGhIjKlMnOpQrStUvWxYz", ["echo ", " x"]),
    ("echo pplx-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789AbCdEfGhIjKl x", "AbCdEfGhIjKlMnOpQrStUvWxYz", ["echo ", " x"]),
    ("echo lsv2_pt_0123456789abcdef0123456789abcdef_0123456789 x", "0123456789abcdef0123456789abcdef", ["echo ", " x"]),
    ("notify https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX x", "XXXXXXXXXXXXXXXXXXXXXXXX",
     ["notify ", " x"]),
    ("azcopy copy 'https://a.blob.core.windows.net/c?sp=r&sig=Ab12Cd34Ef56Gh78Ij90Kl%2BMn%3D' .", "Ab12Cd34Ef56Gh78Ij90Kl",
     ["azcopy copy 'https://a.blob.core.windows.net/c?sp=r&sig=", "' ."]),
    ("step 4: using Zx9QmT4vB2nL8kR1yW6pH3sJ0dF5gC7a now", "Zx9QmT4vB2nL8kR1yW6pH3sJ0dF5gC7a", ["step 4: using ", " now"]),
    # last, as a quote no later quote closes runs to its line's end (a script cut short, a typo)
    ('echo ok\nexport DB_PASSWORD="unclosed234 x', "unclosed234", ['echo ok\nexport DB_PASSWORD="']),
]


@pytest.mark.parametrize("line, secret, kept", FORMS)
def test_each_form_masks_the_secret_and_keeps_the_text(line: str, secret: str, kept: list[str]) -> None:
    assert _masked(line, secret, kept), redact.text(line)


def _masked(line: str, secret: str, kept: list[str]) -> bool:
    out = redact.text(line)
    return secret not in out and redact.MASK in out and all(part in out for part in kept)


DATA = tomllib.loads(redact.BUILTIN.read_text())


@pytest.mark.parametrize("key, index", [(k, i) for k in redact.LISTS for i in range(len(DATA[k]))])
def test_each_entry_of_the_data_is_needed_by_a_form(key: str, index: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any one name, scheme or pattern of redact.toml some form is no longer masked as it
    should be: each entry is tested, and none is dead."""
    rest = {k: [e for i, e in enumerate(v) if (k, i) != (key, index)] for k, v in DATA.items()}
    (tmp_path / "redact.toml").write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in rest.items()))
    monkeypatch.setattr(redact, "BUILTIN", tmp_path / "redact.toml")
    monkeypatch.setattr(redact, "rule_dirs", lambda: [])
    redact._patterns.cache_clear()
    try:
        assert not all(_masked(*form) for form in FORMS), f"{key}[{index}] {DATA[key][index]!r} masks nothing alone"
    finally:
        redact._patterns.cache_clear()


@pytest.mark.parametrize("line", [
    "PWD=/home/ada OLDPWD=/tmp",  # the working directory, not a password
    "mysql -u root -p < dump.sql",  # -p alone: mysql prompts for the password
    "sshpass -f pwfile ssh -p 2222 host",  # ssh's port, after sshpass's own options
    "curl --user-agent 'probe:1' https://x",
    "the key is to shard the dataset",  # prose: no option dashes, no = or :
    "the default password is changed; machine learning",  # no netrc entry
    "srun --nodes=4 python train.py --lr 3e-4 /scratch/ada/runs/llama/ckpt",
    "srun -p gpu python x.py; docker run -p 8080:80 img; ssh -p 2222 host",  # a partition and ports
    "echo $PW | docker login -u bob --password-stdin ghcr.io",  # a flag, not a password's option
    "export TOKEN=\nsrun x",  # an empty value: the next line is no value
    "export TOKENIZERS_PARALLELISM=false PASSES=3 BYPASS=1 GIT_AUTHOR_NAME=ada",
    "python train.py --max-tokens 4096 --num-key-value-heads 8 --author ada",
    "ssh-keygen -t ed25519 -N '' -f key && curl https://host:8443/x ssh://git@host:22/r",  # no passphrase, ports
    "export PATH=/x:$PATH PATTERN=a LOWPASS=0.5 COMPASS=2; ip link set eth0 address 00:11:22:33:44:55",
    "rclone config create r s3 provider AWS access_key_id AKEXAMPLE region us-east-1",  # an id, no secret
    "echo 'started at 12:30:45'; zip -r out.zip data; 7z x -y a.7z; smbclient -L srv -N",
    "if token:\n    login(token)\nsrun x",  # not YAML: the key does not start its line
])
def test_ordinary_text_is_kept(line: str) -> None:
    assert redact.text(line) == line


def test_an_ordinary_training_script_comes_through_unchanged() -> None:
    """A real-shaped sbatch script (NCCL and CUDA settings, torchrun with Megatron's options, W&B and
    Hugging Face settings, paths) holds no secret, so redaction changes none of it."""
    script = CLEAN.read_text()
    assert redact.text(script) == script


def test_a_script_of_every_form_keeps_none_of_them() -> None:
    """All the forms in one script: no pattern's mask spills into another's secret or swallows the rest."""
    out = redact.text("\n".join(line for line, _, _ in FORMS) + "\nexit 0\n")
    assert not [secret for _, secret, _ in FORMS if secret in out]
    assert out.endswith("\nexit 0\n") and out.count(redact.MASK) >= len(FORMS), out


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
