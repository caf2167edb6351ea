"""The chart renderer of tests/support/helm_render.py, under the name the tests of this folder import."""

from support.helm_render import *  # noqa: F403
