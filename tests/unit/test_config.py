"""Configuration precedence: CLI > environment > TOML file > defaults."""

import pytest

from broker.config import BrokerConfig, load_config


def test_defaults_are_rabbitmq_defaults():
    cfg = load_config([], {})
    assert cfg == BrokerConfig()
    assert (cfg.frame_max, cfg.channel_max, cfg.heartbeat) == (131072, 2047, 60)
    assert cfg.queue_index_embed_msgs_below == 4096


def test_precedence(tmp_path):
    toml = tmp_path / "broker.toml"
    toml.write_text('port = 1000\nheartbeat = 10\nlog_level = "debug"\n'
                    'vm_memory_high_watermark = 0.3\n')
    env = {"BROKER_PORT": "2000", "BROKER_HEARTBEAT": "20"}
    cfg = load_config(["--config", str(toml), "--port", "3000"], env)
    assert cfg.port == 3000  # CLI wins
    assert cfg.heartbeat == 20  # env beats file
    assert cfg.log_level == "debug"  # file beats default
    assert cfg.vm_memory_high_watermark == 0.3


def test_config_file_from_environment_and_set_flag(tmp_path):
    toml = tmp_path / "b.toml"
    toml.write_text("[broker]\nframe_max = 8192\n")
    cfg = load_config(["--set", "fsync=false", "--data-dir", "/tmp/x"],
                      {"BROKER_CONFIG": str(toml)})
    assert cfg.frame_max == 8192
    assert cfg.fsync is False
    assert cfg.data_dir == "/tmp/x"


def test_bad_values_are_rejected():
    with pytest.raises(ValueError) as info:
        load_config(["--set", "nope=1"], {})
    assert "unknown key" in str(info.value)
    with pytest.raises(ValueError):
        load_config([], {"BROKER_FSYNC": "maybe"})


def test_resource_settings_take_rabbitmq_units_and_names(tmp_path):
    from broker.config import parse_information_unit as size

    assert size("512MB") == 512_000_000 and size("1GiB") == 1 << 30 and size("800M") == 800 << 20
    assert size("2kB") == 2000 and size("2k") == 2048 and size(1024) == 1024
    for bad in ("12XB", "MB", "-1MB", "lots"):
        with pytest.raises(ValueError):
            size(bad)
    cfg = load_config(["--set", "vm_memory_high_watermark.absolute=512MB",
                       "--set", "disk_free_limit.absolute=1GB",
                       "--set", "vm_memory_high_watermark.relative=0.6"], {})
    assert cfg.vm_memory_high_watermark_absolute == 512_000_000
    assert cfg.disk_free_limit == 1_000_000_000
    assert cfg.vm_memory_high_watermark == 0.6
    toml = tmp_path / "r.toml"
    toml.write_text('[vm_memory_high_watermark]\nabsolute = "1GiB"\n'
                    '[disk_free_limit]\nrelative = 1.5\n')
    cfg = load_config(["--config", str(toml)], {"BROKER_DISK_FREE_LIMIT": "2GB"})
    assert cfg.vm_memory_high_watermark_absolute == 1 << 30
    assert cfg.disk_free_limit_relative == 1.5
    assert cfg.disk_free_limit == 2_000_000_000
    with pytest.raises(ValueError):
        load_config(["--set", "vm_memory_high_watermark=1.5"], {})


def test_paging_ratio_above_one_turns_paging_off():
    """rabbitmq.com/memory.html: a vm_memory_high_watermark_paging_ratio above 1.0 keeps
    queues from paging at all; 0 or less is refused."""
    from broker.config import load_config

    assert load_config(["--set", "vm_memory_high_watermark_paging_ratio=2.0"]
                       ).vm_memory_high_watermark_paging_ratio == 2.0
    with pytest.raises(ValueError):
        load_config(["--set", "vm_memory_high_watermark_paging_ratio=0"])
