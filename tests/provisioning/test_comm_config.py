"""Every kit carries the streaming settings that let slow links take part, and FLARE itself reads them from the kit
(provisioning.policy.COMM_CONFIG; measured on emulated 1-2 Mbit/s links in bench/wan_testbed.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from federation_tools.loopback import free_port
from provisioning.policy import COMM_CONFIG
from provisioning.provision import customise, load_template, provision

_READ_AS_FLARE = ("import sys; from nvflare.fuel.utils.config_service import ConfigService; "
                  "from nvflare.fuel.f3.comm_config import CommConfigurator; "
                  "ConfigService.initialize(section_files={}, config_path=[sys.argv[1]]); c = CommConfigurator(); "
                  "print(c.get_streaming_retry_wait(5.0), c.get_streaming_retry_timeout(60.0))")


def test_every_kit_gets_the_slow_link_settings_and_flare_reads_them(tmp_path):
    federation = provision(customise(load_template(None), name="comm", sites=["site-1"], port=free_port()), tmp_path)

    for name in (federation.server, "site-1"):
        kit = federation.kit(name)
        path = kit / "local" / "comm_config.json"
        assert json.loads(path.read_text()) == COMM_CONFIG and path.stat().st_mode & 0o077 == 0
        read = subprocess.run([sys.executable, "-c", _READ_AS_FLARE, str(kit)], capture_output=True, text=True,
                              check=True, timeout=120)
        assert read.stdout.split() == [str(COMM_CONFIG["streaming_retry_wait"]),
                                       str(COMM_CONFIG["streaming_retry_timeout"])]
