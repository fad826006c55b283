"""The gramkiln runtime: vocabularies, compilation against them, artifacts and matchers."""
