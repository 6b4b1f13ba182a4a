# SPDX-License-Identifier: Apache-2.0
"""The oslo.policy console tools on ringfleet's rules (entry points
``oslo.policy.policies`` and ``oslo.policy.enforcer``, ``ringfleet.api``).

The tools run as an operator runs them: the console scripts of the
virtualenv's ``bin``, in a process of their own (run by this interpreter, so
that a virtualenv copied elsewhere still finds its own packages).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from conductor.api import policy

BIN = Path(sys.executable).parent


def _tool(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BIN / name), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _on_ringfleet(
    name: str, config: Path, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """A tool run on ringfleet's rules with the deployment's configuration."""
    return _tool(name, "--namespace", "ringfleet.api", "--config-file", str(config), *args, cwd=cwd)


def _deployment(tmp_path: Path) -> Path:
    """A ringfleet.conf whose policy file overrides one rule and repeats one default."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(
        '"ringfleet:node:create": "role:admin or role:fleet_operator"\n'
        '"ringfleet:flavor:create": "role:admin"\n'
    )
    config = tmp_path / "ringfleet.conf"
    config.write_text(f"[oslo_policy]\npolicy_file = {policy_file}\n")
    return config


def test_policy_generator_prints_the_effective_policy(tmp_path: Path) -> None:
    config = _deployment(tmp_path)
    out = _on_ringfleet("oslopolicy-policy-generator", config, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    effective = yaml.safe_load(out.stdout)
    assert set(effective) == set(policy.RULE_NAMES)
    assert effective["ringfleet:node:create"] == "role:admin or role:fleet_operator"
    assert effective["ringfleet:node:list"] == policy.ADMIN
    assert effective["ringfleet:flavor:list"] == policy.READER


def test_list_redundant_names_only_the_rules_equal_to_their_default(tmp_path: Path) -> None:
    config = _deployment(tmp_path)
    out = _on_ringfleet("oslopolicy-list-redundant", config, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ['"ringfleet:flavor:create": "role:admin"']


def test_validator_accepts_the_policy_file(tmp_path: Path) -> None:
    config = _deployment(tmp_path)
    out = _on_ringfleet("oslopolicy-validator", config, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    # Without a policy file where the configuration says, it says so.
    config.write_text(f"[oslo_policy]\npolicy_file = {tmp_path / 'missing.yaml'}\n")
    missing = _on_ringfleet("oslopolicy-validator", config, cwd=tmp_path)
    assert missing.returncode == 1
    assert "missing.yaml" in missing.stdout


def _access(tmp_path: Path, *roles: str) -> Path:
    """A Keystone token body (``GET /v3/auth/tokens``) as the checker reads it."""
    access = tmp_path / f"access-{'-'.join(roles)}.json"
    access.write_text(
        json.dumps(
            {
                "token": {
                    "user": {"id": "u1", "name": "alice", "domain": {"id": "default"}},
                    "project": {"id": "p1", "name": "fleet", "domain": {"id": "default"}},
                    "roles": [{"id": role, "name": role} for role in roles],
                }
            }
        )
    )
    return access


def test_checker_evaluates_the_generated_policy_for_a_token(tmp_path: Path) -> None:
    config = _deployment(tmp_path)
    effective = tmp_path / "effective.yaml"
    generated = _on_ringfleet(
        "oslopolicy-policy-generator", config, "--output-file", str(effective), cwd=tmp_path
    )
    assert generated.returncode == 0, generated.stderr

    def check(*roles: str) -> dict[str, str]:
        out = _tool(
            "oslopolicy-checker",
            "--policy",
            str(effective),
            "--access",
            str(_access(tmp_path, *roles)),
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr
        verdicts = dict(line.split(": ", 1)[::-1] for line in out.stdout.splitlines())
        assert set(verdicts) == set(policy.RULE_NAMES) - {policy.CONTEXT_IS_ADMIN}
        return verdicts

    reader = check("reader")
    assert reader["ringfleet:flavor:list"] == "passed"
    assert reader["ringfleet:node:list"] == "failed"
    assert reader["ringfleet:node:create"] == "failed"
    assert reader["ringfleet:instance:create"] == "failed"
    # The override in the policy file applies; the default elsewhere.
    operator = check("reader", "fleet_operator")
    assert operator["ringfleet:node:create"] == "passed"
    assert operator["ringfleet:flavor:create"] == "failed"
    assert check("admin")["ringfleet:flavor:create"] == "passed"


def test_the_policy_sample_is_up_to_date(tmp_path: Path) -> None:
    """etc/ringfleet/policy.yaml.sample (installed in share/ringfleet) is what
    oslopolicy-sample-generator makes of the rules in the code."""
    repo = Path(__file__).resolve().parents[2]
    generated = tmp_path / "policy.yaml.sample"
    out = _tool(
        "oslopolicy-sample-generator",
        "--config-file",
        str(repo / "etc/ringfleet/ringfleet-policy-generator.conf"),
        "--output-file",
        str(generated),
        cwd=repo,
    )
    assert out.returncode == 0, out.stderr
    assert generated.read_text() == (repo / "etc/ringfleet/policy.yaml.sample").read_text(), (
        "the policy sample is out of date: run oslopolicy-sample-generator "
        "--config-file etc/ringfleet/ringfleet-policy-generator.conf"
    )
