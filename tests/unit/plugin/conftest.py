"""Fixtures shared by the plugin's unit tests."""

from __future__ import annotations

import logging

import pytest


@pytest.fixture
def driver_logger_restored(monkeypatch):
    """logfmt.setup changes the process's `driver` logger: put it back for the tests after these."""
    driver = logging.getLogger("driver")
    monkeypatch.setattr(driver, "handlers", list(driver.handlers))
    monkeypatch.setattr(driver, "propagate", driver.propagate)
    monkeypatch.setattr(driver, "level", driver.level)
