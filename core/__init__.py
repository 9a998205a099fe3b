"""The shared core below the five pipeline stages.

``core`` holds what every stage needs and no stage owns: the error type, chat rendering
and templates, model loading and generation. Stages import from here and from earlier
stages' outputs, never the other way round (core ← data_synthesis ← training ← probes ←
analysis ← interventions ← CLI).
"""
