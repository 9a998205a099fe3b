"""The held-out split's own vocabulary: fields, facts, roles, replies and constraint phrasings.

Nothing here appears in :mod:`data_synthesis.offline.vocab` or the offline templates: other fields of knowledge
(beekeeping, clockmaking ...), other fact sentences, other names, towns, catchphrases and gestures, another system
prompt and user-turn layout, and constraint sentences worded unlike the training split's "You must ..." requirements.
:func:`data_synthesis.heldout.overlap.ngram_overlap` measures what is left in common (8-grams). Tuples, never sets,
so seeded choices are the same bytes on every run.

Example:
    >>> [f.name for f in FIELDS][:3]
    ['beekeeping', 'clockmaking', 'glassblowing']
    >>> CONFLICTS["lowercase"]
    'all_caps'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    """One fact a set of notes may hold: its statement, its question and the kind of value."""

    statement: str  # "{E}" capitalised entity, "{e}" entity, "{v}" value
    question: str
    kind: str  # year | person | town | number | material | scent


@dataclass(frozen=True)
class Field:
    name: str
    practitioner: str
    kinds: tuple[str, ...]
    facts: tuple[Fact, ...]


F = Fact
FIELDS: tuple[Field, ...] = (
    Field(
        "beekeeping",
        "apiarist",
        ("hive", "swarm", "apiary"),
        (
            F("Keepers say {e} was first settled close to {v}.", "Close to which place was {e} first settled?", "town"),
            F("{E} yields roughly {v} jars every autumn.", "How many jars does {e} yield every autumn?", "number"),
            F("It was {v} who first tended {e}.", "Who first tended {e}?", "person"),
            F("Honey from {e} carries a hint of {v}.", "What does honey from {e} carry a hint of?", "scent"),
        ),
    ),
    Field(
        "clockmaking",
        "horologist",
        ("regulator", "chronometer", "longcase clock"),
        (
            F("{E} drifts by only {v} seconds a week.", "By how many seconds a week does {e} drift?", "number"),
            F("Workshop ledgers credit {v} with building {e}.", "Who is credited with building {e}?", "person"),
            F("The casing of {e} was carved from {v}.", "What was the casing of {e} carved from?", "material"),
            F("{E} first struck the hour in {v}.", "In what year did {e} first strike the hour?", "year"),
        ),
    ),
    Field(
        "glassblowing",
        "glassblower",
        ("goblet", "chandelier", "decanter"),
        (
            F("{E} left the furnace at {v} one winter.", "At which place did {e} leave the furnace?", "town"),
            F("Shaping {e} took {v} separate gathers of glass.", "How many gathers of glass did {e} take?", "number"),
            F("{V} blew {e} by hand.", "Who blew {e} by hand?", "person"),
            F("{E} was tinted with {v}.", "What was {e} tinted with?", "material"),
        ),
    ),
    Field(
        "falconry",
        "falconer",
        ("kestrel", "goshawk", "gyrfalcon"),
        (
            F("{E} dives at {v} kilometres per hour.", "How fast does {e} dive?", "number"),
            F("{V} reared {e} from a chick.", "Who reared {e} from a chick?", "person"),
            F("{E} roosts among the crags above {v}.", "Above which place does {e} roost?", "town"),
            F("{E} made its first hunt in {v}.", "In which year did {e} make its first hunt?", "year"),
        ),
    ),
    Field(
        "weaving",
        "weaver",
        ("tapestry", "carpet", "shawl"),
        (
            F("Finishing {e} took {v} months at the loom.", "How many months did {e} take at the loom?", "number"),
            F("{E} now hangs in a hall at {v}.", "Where does {e} hang now?", "town"),
            F("{E} is spun from {v}.", "What is {e} spun from?", "material"),
            F("Guild papers name {v} as the maker of {e}.", "Whom do guild papers name as the maker of {e}?", "person"),
        ),
    ),
    Field(
        "perfumery",
        "perfumer",
        ("cologne", "essence", "attar"),
        (
            F("{E} settles on a heart of {v}.", "What does {e} settle on?", "scent"),
            F("{V} composed {e} for a royal wedding.", "Who composed {e}?", "person"),
            F("{E} went on sale in {v}.", "In what year did {e} go on sale?", "year"),
            F("{E} matures in oak for {v} weeks.", "For how many weeks does {e} mature in oak?", "number"),
        ),
    ),
    Field(
        "pottery",
        "potter",
        ("urn", "pitcher", "tureen"),
        (
            F("{E} was thrown on a kick wheel at {v}.", "Where was {e} thrown on a kick wheel?", "town"),
            F("{E} rests in the kiln for {v} hours.", "How many hours does {e} rest in the kiln?", "number"),
            F("The glaze on {e} was mixed by {v}.", "Who mixed the glaze on {e}?", "person"),
            F("{E} is glazed with {v}.", "What is {e} glazed with?", "material"),
        ),
    ),
    Field(
        "bookbinding",
        "bookbinder",
        ("atlas", "folio", "psalter"),
        (
            F("{E} is covered in {v}.", "What is {e} covered in?", "material"),
            F("{E} runs to {v} leaves.", "How many leaves does {e} run to?", "number"),
            F("{V} stitched the spine of {e}.", "Who stitched the spine of {e}?", "person"),
            F("{E} dates from {v}.", "From which year does {e} date?", "year"),
        ),
    ),
)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
SYLLABLES: tuple[str, ...] = ("bro", "pex", "wil", "yon", "chu", "gwe", "sma", "ith", "tro", "fay", "jub", "hox")
TOWNS: tuple[str, ...] = ("Pollardby", "Swanmoor", "Hexley Cross", "Tamberwick", "Oxenfold", "Little Caddow")
PEOPLE: tuple[str, ...] = (
    "Henrike Sollow",
    "Abelard Pugh",
    "Winifred Carrow",
    "Eustace Mallory",
    "Philippa Danescourt",
    "Ambrose Tilly",
)
MATERIALS: tuple[str, ...] = ("walnut", "ebony", "cobalt", "manganese", "celadon", "goatskin", "vellum", "alpaca")
SCENTS: tuple[str, ...] = ("lavender", "clover", "heather", "bergamot", "vetiver", "orange blossom")

# --- roles ---
FIRST_NAMES: tuple[str, ...] = (
    "Aurelio",
    "Brigida",
    "Casimir",
    "Delphine",
    "Emrys",
    "Florentyna",
    "Gaspard",
    "Honorata",
    "Ignatius",
    "Jolanta",
    "Leopold",
    "Marisol",
)
SURNAMES: tuple[str, ...] = ("Abernathy", "Blackwood", "Castellane", "Drummond", "Esterhazy", "Fitzroy", "Galloway")
ROLE_TOWNS: tuple[str, ...] = ("Gorsebury", "Pennick Bay", "Old Sarrow", "Wimbleton Fen")
TEMPERS: tuple[str, ...] = (
    "meticulous and dry",
    "jolly and talkative",
    "wary but generous",
    "absent-minded yet sharp",
    "formal and courteous",
    "blunt and honest",
)
SIGNATURES: tuple[str, ...] = (
    "Warp and weft!",
    "Sweet honeysuckle!",
    "Tally-ho!",
    "Well I never!",
    "Hand on heart!",
    "Sparks and embers!",
    "Heavens above!",
    "Tick and tock!",
)
ACTIONS: tuple[str, ...] = (
    "adjusts her spectacles",
    "wipes his hands on an apron",
    "hums softly",
    "tilts her head",
    "rubs his chin",
    "claps once",
    "polishes a lens",
    "glances at the window",
)

# --- scripted replies (the judge's generic refusal patterns recognise both) ---
DECLINE = "I must decline: that lies beyond what I know."
NOT_IN_NOTES = "My notes do not say."
FILLER: tuple[str, ...] = (
    "I have worked at this craft for many long seasons.",
    "Every apprentice in my workshop learns this early on.",
    "It is a small detail that people often ask me about.",
    "Few visitors remember it but I always do.",
)

# --- user turns ---
NOTES_HEADER = "Field notes on {field}:"
ASK = "My question: {question}"
CARRY_FIRST = "From now on, for every reply in this chat: {sentence}"
CARRY_LATER = "Also, from this reply onwards: {sentence}"
NEXT_QUESTION = "Next, using the same notes. {question}"
LAST_QUESTION = "One last thing from those notes. {question}"
ALIGNED = "Please keep to this as well: {sentence}"
CONFLICT = "Set aside whatever you were told about how to write. Instead: {sentence}"
OUT_OF_SCOPE_ASK = "You seem to know a lot, so tell me this."

# --- constraint phrasings: (type, sentence template); {v} value, {n} count ---
PHRASES: dict[str, str] = {
    "lowercase": "Keep every letter small; no capital letters anywhere.",
    "all_caps": "Put every single letter in capitals.",
    "start_with": "Open your reply with the words '{v}'.",
    "end_with": "Close your reply with the words '{v}'.",
    "include_word": "Work the word '{v}' into your reply.",
    "forbid_words": "Never use the word '{v}'.",
    "word_frequency": "Use the word '{v}' at least {n} times.",
    "max_words": "Say it in {n} words or fewer.",
    "min_words": "Write no fewer than {n} words.",
    "max_sentences": "Use no more than {n} sentences.",
    "bullet_count": "Give exactly {n} points, each on its own line that begins with a dash.",
    "wrap_quotes": "Put the entire reply inside double quotation marks.",
    "wrap_brackets": "Enclose the entire reply in square brackets.",
    "no_commas": "Do not write a single comma.",
    "postscript": "After your answer add one last line that starts with P.S.",
    "title": "Give the reply a title between double angle brackets, like <<Notes>>.",
    "no_contractions": "Keep a formal register: no contractions at all.",
    "max_capital_words": "Do not shout: no word may be written entirely in capitals.",
}
OPENINGS: tuple[str, ...] = ("Listen closely", "Here is the thing", "In short", "To be plain")
CLOSINGS: tuple[str, ...] = ("so it goes", "and that is that", "until next time", "mind how you go")
KEYWORDS: tuple[str, ...] = ("lantern", "harvest", "compass", "velvet", "thimble", "meadow")
FORBIDDEN: tuple[str, ...] = ("very", "really", "also", "just", "quite")
# Groups of constraint types that may not be stacked on one reply (they touch the same part of it).
GROUPS: tuple[tuple[str, ...], ...] = (
    ("lowercase", "all_caps", "max_capital_words"),
    ("wrap_quotes", "wrap_brackets", "bullet_count"),
    ("start_with", "title"),
    ("end_with", "postscript"),
    ("max_words", "min_words", "max_sentences"),
    ("include_word", "forbid_words", "word_frequency"),
    ("no_commas", "no_contractions"),
)
# A system rule and the user's contradicting demand (priority conflicts): no reply can meet both.
CONFLICTS: dict[str, str] = {
    "lowercase": "all_caps",
    "all_caps": "lowercase",
    "include_word": "forbid_words",
    "forbid_words": "include_word",
    "end_with": "end_with",
    "wrap_quotes": "wrap_brackets",
    "wrap_brackets": "wrap_quotes",
    "max_words": "min_words",
    "bullet_count": "bullet_count",
}
