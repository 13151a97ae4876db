"""How a site feeds its device is the site's own configuration: defaults, checks, `site-agent configure`."""

from __future__ import annotations

import json

import pytest

from site_agent.cli import main
from site_agent.kit.site_config import ComputeSettings, SiteConfig, SiteConfigError, write_site_config


def test_a_config_without_compute_settings_keeps_the_cpu_behaviour(tmp_path):
    path = tmp_path / "site_agent.json"
    path.write_text(json.dumps({"datasets": {"brats": "/data"}, "device": "auto"}))

    config = SiteConfig.load(path)

    assert config.compute == ComputeSettings(loader_workers=0, data_cache="memory", encode_batch_size=None)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("loader_workers", -1, '"loader_workers" is -1; use 0'),
    ("loader_workers", "4", "\"loader_workers\" is '4'"),
    ("data_cache", "ssd", r"\"data_cache\" is 'ssd'; use one of \['memory', 'disk'\]"),
    ("encode_batch_size", 0, '"encode_batch_size" is 0; use a positive integer or null'),
    ("loader_worker", 4, r"unknown fields \['loader_worker'\]"),
])
def test_a_wrong_setting_names_the_file_and_the_fix(tmp_path, field, value, message):
    path = tmp_path / "site_agent.json"
    path.write_text(json.dumps({"datasets": {}, field: value}))

    with pytest.raises(SiteConfigError, match=f"site_agent.json: {message}"):
        SiteConfig.load(path)


def test_configure_sets_the_compute_settings_and_keeps_them_on_the_next_edit(tmp_path, capsys):
    kit = tmp_path / "site-1"
    write_site_config(kit, {"brats": str(tmp_path)})

    assert main(["configure", "--kit", str(kit), "--loader-workers", "6", "--data-cache", "disk",
                 "--encode-batch-size", "512"]) == 0
    assert main(["configure", "--kit", str(kit), "--data", f"isic={tmp_path}"]) == 0

    config = SiteConfig.for_kit(kit)
    assert config.compute == ComputeSettings(loader_workers=6, data_cache="disk", encode_batch_size=512)
    assert set(config.datasets) == {"brats", "isic"}
