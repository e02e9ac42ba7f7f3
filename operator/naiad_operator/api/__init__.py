"""Typed mirrors of the CRDs (spec and status) and of what the operator observes."""
