"""Gatehouse control plane: sources → model → translator → snapshot cache → ADS."""
