"""The hospital's proxy in the site configuration: `site-agent configure --proxy` writes it, a malformed one is named
with the fix, `none` removes it, the kit reads it, and `check` refuses a proxy on a transport that ignores proxies
(the proxy-only site itself: tests/federation/test_proxy_site.py)."""

from __future__ import annotations

import pytest

from site_agent.cli import main as site_agent
from site_agent.kit.preflight import FAIL, check_server
from site_agent.kit.site_config import SiteConfig, SiteConfigError, parse_proxy, write_site_config
from site_agent.kit.startup import SiteKit


@pytest.mark.parametrize("value", ["proxy.hospital.org:3128", "https://proxy:3128", "http://proxy", "http://p:1/x", 7])
def test_a_malformed_proxy_is_named_with_the_fix(tmp_path, value):
    with pytest.raises(SiteConfigError, match=r"give the proxy as http://HOST:PORT") as refused:
        parse_proxy(value, tmp_path / "site_agent.json")
    assert "site_agent.json" in str(refused.value)


def test_configure_writes_and_removes_the_proxy_and_keeps_the_rest(tmp_path):
    (tmp_path / "local").mkdir()
    write_site_config(tmp_path, {"linear": str(tmp_path)}, "cpu")
    assert site_agent(["configure", "--kit", str(tmp_path), "--proxy", "http://proxy.hospital.org:3128"]) == 0
    config = SiteConfig.for_kit(tmp_path)
    assert config.proxy == "http://proxy.hospital.org:3128" and config.datasets == {"linear": str(tmp_path)}
    assert config.device == "cpu"
    assert site_agent(["configure", "--kit", str(tmp_path), "--proxy", "none"]) == 0
    assert SiteConfig.for_kit(tmp_path).proxy is None


def test_a_proxy_on_the_http_transport_fails_the_server_row(tmp_path):
    kit = SiteKit(tmp_path, "site-1", "fl.example.org", 8002, "fl.example.org", "http", "http://proxy:3128")
    row = check_server(kit)
    assert row.status == FAIL and "does not go through an HTTP proxy" in row.detail
    assert "fl-provision --scheme grpc" in row.fix
