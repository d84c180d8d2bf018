"""Tests of diagnosis_harness.integrations against the real SDKs and a loopback provider."""
