"""A small English sentence grammar for the synthesized ``sentences`` task.

Sentences are drawn from a dozen templates (statements, questions, requests, reports
with numbers, dates and places) over hand-written word lists of about 800 words.  The
lists avoid homophones that a listener cannot tell apart without context (``two/too``,
``four/for``, ``right/write``, ``their/there``...): the task is recognition, not
spelling by guesswork.  Every word is lower case ASCII letters (``'`` is avoided too),
so transcripts need no normalisation.

``sentence(rng)`` is a pure function of the numpy generator's state, so a corpus built
from a seeded generator is reproducible.  ``vocabulary()`` lists every word any
template can produce (tests check it is at least 500 words).
"""
from __future__ import annotations

import numpy as np

NAMES = """alice oliver emma james sophia william olivia henry grace lucas chloe daniel
amelia samuel hannah thomas julia martin laura peter nina victor clara oscar maria
simon elena george rachel patrick sarah robert helen edward diana frank monica""".split()

# (singular, plural)
NOUNS = [(w, w + "s") for w in """doctor teacher farmer driver painter singer pilot
student artist builder baker sailor soldier writer player dancer lawyer nurse
engineer gardener window table chair garden kitchen bottle basket ticket letter
picture camera pencil blanket button candle carpet mirror pillow bucket hammer
ladder rocket engine wagon cabin castle island village market station bridge
tower river mountain forest valley desert planet animal rabbit tiger monkey
dragon eagle parrot turtle spider dolphin lion horse camel donkey kitten
orange apple lemon banana carrot onion cookie biscuit muffin
pizza jacket sweater helmet hat glove sock boot shirt blouse computer phone
printer radio clock lamp heater fridge oven cupboard drawer folder document
report message record meeting lesson problem question answer journey holiday
festival concert movie song poem game puzzle card coin stone shell
feather flower tree seed plant road street tunnel airport harbour
hospital museum theatre office hotel restaurant school
castle""".split()]
NOUNS = sorted(set(NOUNS)) + [("box", "boxes"), ("bus", "buses"), ("church", "churches"),
                              ("dish", "dishes"), ("brush", "brushes"), ("glass", "glasses"),
                              ("city", "cities"), ("party", "parties"), ("baby", "babies"),
                              ("lady", "ladies"), ("country", "countries"), ("family", "families"),
                              ("child", "children"), ("woman", "women"), ("man", "men"),
                              ("mouse", "mice"), ("goose", "geese"), ("knife", "knives"),
                              ("wolf", "wolves"), ("potato", "potatoes"),
                              ("tomato", "tomatoes"), ("leaf", "leaves"), ("sandwich", "sandwiches"),
                              ("story", "stories"), ("library", "libraries"), ("factory", "factories"),
                              ("puppy", "puppies")]

# (base, third person, past) for transitive verbs
VERBS = [("open", "opens", "opened"), ("close", "closes", "closed"),
         ("paint", "paints", "painted"), ("clean", "cleans", "cleaned"),
         ("carry", "carries", "carried"), ("watch", "watches", "watched"),
         ("follow", "follows", "followed"), ("visit", "visits", "visited"),
         ("build", "builds", "built"), ("bring", "brings", "brought"),
         ("find", "finds", "found"), ("keep", "keeps", "kept"),
         ("sell", "sells", "sold"), ("send", "sends", "sent"),
         ("take", "takes", "took"), ("draw", "draws", "drew"),
         ("hold", "holds", "held"), ("lift", "lifts", "lifted"),
         ("push", "pushes", "pushed"), ("pull", "pulls", "pulled"),
         ("check", "checks", "checked"), ("fix", "fixes", "fixed"),
         ("wash", "washes", "washed"), ("move", "moves", "moved"),
         ("order", "orders", "ordered"), ("change", "changes", "changed"),
         ("cover", "covers", "covered"), ("deliver", "delivers", "delivered"),
         ("explain", "explains", "explained"), ("describe", "describes", "described"),
         ("collect", "collects", "collected"), ("protect", "protects", "protected"),
         ("repair", "repairs", "repaired"), ("prepare", "prepares", "prepared"),
         ("borrow", "borrows", "borrowed"), ("return", "returns", "returned"),
         ("remember", "remembers", "remembered"), ("forget", "forgets", "forgot"),
         ("choose", "chooses", "chose"), ("throw", "throws", "threw"),
         ("catch", "catches", "caught"), ("drop", "drops", "dropped"),
         ("show", "shows", "showed"), ("hide", "hides", "hid"),
         ("like", "likes", "liked"), ("love", "loves", "loved"),
         ("want", "wants", "wanted"), ("need", "needs", "needed"),
         ("cook", "cooks", "cooked"), ("bake", "bakes", "baked"),
         ("share", "shares", "shared"), ("test", "tests", "tested"),
         ("print", "prints", "printed"), ("study", "studies", "studied"),
         ("answer", "answers", "answered"), ("pack", "packs", "packed"),
         ("count", "counts", "counted"), ("measure", "measures", "measured")]

# (past, ing) of intransitive verbs used with places and times
MOTION = [("walked", "walking"), ("ran", "running"),
          ("drove", "driving"), ("travelled", "travelling"),
          ("swam", "swimming"), ("flew", "flying"),
          ("hurried", "hurrying"), ("arrived", "arriving"),
          ("slept", "sleeping"), ("worked", "working"),
          ("danced", "dancing"), ("sang", "singing"),
          ("waited", "waiting"), ("climbed", "climbing"),
          ("played", "playing"), ("jumped", "jumping"),
          ("laughed", "laughing"), ("listened", "listening"),
          ("smiled", "smiling"), ("shouted", "shouting")]

ADJECTIVES = """big small little large tiny huge long short tall heavy light old young
new ancient modern warm cold hot cool soft hard smooth rough clean dirty empty full
quiet loud bright dark happy sad angry calm brave clever funny friendly lazy busy
rich poor strong fast slow sweet sour bitter fresh wooden metal plastic broken
famous strange simple careful gentle wild lovely ugly pretty narrow wide deep shallow
thick thin sharp square round fancy cheap expensive""".split()

COLOURS = "red green yellow purple orange pink brown black white silver golden grey".split()

ADVERBS = """quickly slowly quietly loudly carefully happily sadly gently suddenly
finally early later always never often sometimes usually rarely together""".split()

PLACES = """london paris berlin madrid rome vienna dublin oslo prague lisbon athens
warsaw tokyo cairo sydney toronto boston chicago denver dallas seattle miami
houston mexico brazil canada india china japan egypt spain france italy norway
sweden poland""".split()

DAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
MONTHS = "january february march april may june july august september october november december".split()
TIMES = ["this morning", "this evening", "last night", "last week", "next week", "next year",
         "yesterday", "today", "tomorrow", "at noon", "at midnight", "in the afternoon"]

NUMBERS = """one three five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
eighty ninety""".split()
ORDINALS = """first second third fourth fifth sixth seventh eighth ninth tenth eleventh
twelfth thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth
twentieth""".split()
PREPOSITIONS = ["on", "under", "behind", "beside", "near", "inside", "above", "below", "between"]
QUANTIFIERS = ["many", "several", "some", "three", "five", "seven", "twelve", "twenty", "forty"]


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _noun_phrase(rng, plural: bool = False) -> str:
    noun = _pick(rng, NOUNS)[1 if plural else 0]
    shape = int(rng.integers(4))
    if plural:
        det = _pick(rng, ["the", "some", "many", "those", "these", _pick(rng, QUANTIFIERS)])
    else:
        det = _pick(rng, ["the", "a", "this", "that", "my", "your", "her", "his", "our"])
        if det == "a" and noun[0] in "aeiou":
            det = "an"
    words = [det]
    if shape >= 1:
        adj = _pick(rng, ADJECTIVES if shape < 3 else COLOURS)
        if det == "a" and adj[0] in "aeiou":
            words[0] = "an"
        elif det == "an" and adj[0] not in "aeiou":
            words[0] = "a"
        words.append(adj)
    words.append(noun)
    return " ".join(words)


def _date(rng) -> str:
    if rng.random() < 0.5:
        return "on " + _pick(rng, DAYS)
    return f"on the {_pick(rng, ORDINALS)} of {_pick(rng, MONTHS)}"


def _statement_past(rng):
    subject = _pick(rng, NAMES) if rng.random() < 0.5 else _noun_phrase(rng)
    verb = _pick(rng, VERBS)[2]
    tail = f" {_pick(rng, TIMES)}" if rng.random() < 0.5 else ""
    return f"{subject} {verb} {_noun_phrase(rng, rng.random() < 0.4)}{tail}"


def _statement_present(rng):
    subject = _pick(rng, NAMES)
    verb = _pick(rng, VERBS)[1]
    return f"{subject} {_pick(rng, ADVERBS)} {verb} {_noun_phrase(rng, True)}"


def _location(rng):
    return f"{_noun_phrase(rng)} is {_pick(rng, PREPOSITIONS)} {_noun_phrase(rng)}"


def _travel(rng):
    verb = _pick(rng, MOTION[:7])  # the verbs of moving somewhere
    return f"{_pick(rng, NAMES)} {verb[0]} to {_pick(rng, PLACES)} {_date(rng)}"


def _future(rng):
    verb = _pick(rng, VERBS)[0]
    return f"{_pick(rng, NAMES)} will {verb} {_noun_phrase(rng, rng.random() < 0.5)} {_pick(rng, TIMES)}"


def _question(rng):
    verb = _pick(rng, VERBS)[0]
    lead = _pick(rng, ["did", "can", "will", "should"])
    return f"{lead} {_pick(rng, NAMES)} {verb} {_noun_phrase(rng)}"


def _wh_question(rng):
    wh = _pick(rng, ["where", "when", "why", "how"])
    verb = _pick(rng, VERBS)[0]
    return f"{wh} did {_pick(rng, ['you', 'they', 'we', _pick(rng, NAMES)])} {verb} {_noun_phrase(rng)}"


def _request(rng):
    verb = _pick(rng, VERBS)[0]
    lead = _pick(rng, ["please", "could you", "would you"])
    return f"{lead} {verb} {_noun_phrase(rng)} {_pick(rng, ADVERBS)}"


def _report(rng):
    count = _pick(rng, NUMBERS)
    noun = _pick(rng, NOUNS)[0 if count == "one" else 1]
    return f"there {'was' if count == 'one' else 'were'} {count} {_pick(rng, ADJECTIVES)} {noun} in {_pick(rng, PLACES)}"


def _progressive(rng):
    verb = _pick(rng, MOTION)[1]
    return f"{_pick(rng, NAMES)} and {_pick(rng, NAMES)} are {verb} {_pick(rng, ADVERBS)}"


def _description(rng):
    noun = _pick(rng, NOUNS)[0]
    return (f"the {noun} was {_pick(rng, ADJECTIVES)} and {_pick(rng, ADJECTIVES)} "
            f"{_pick(rng, ['but', 'and', 'so'])} {_pick(rng, NAMES)} {_pick(rng, VERBS)[2]} it")


def _compound(rng):
    first = _pick(rng, MOTION)
    second = _pick(rng, VERBS)
    return (f"{_pick(rng, NAMES)} {first[0]} {_pick(rng, ADVERBS)} "
            f"{_pick(rng, ['and then', 'before she', 'after he', 'while they'])} {second[2]} {_noun_phrase(rng, True)}")


TEMPLATES = [_statement_past, _statement_present, _location, _travel, _future, _question,
             _wh_question, _request, _report, _progressive, _description, _compound]


def sentence(rng: np.random.Generator) -> str:
    """One sentence (about 4-12 words) from a random template."""
    return _pick(rng, TEMPLATES)(rng)


def vocabulary() -> set[str]:
    """Every word a template can produce."""
    words = set(NAMES) | set(ADJECTIVES) | set(COLOURS) | set(ADVERBS) | set(PLACES) | set(DAYS)
    words |= set(MONTHS) | set(NUMBERS) | set(ORDINALS) | set(PREPOSITIONS) | set(QUANTIFIERS)
    words |= {w for pair in NOUNS for w in pair}
    words |= {w for forms in VERBS + MOTION for w in forms}
    words |= {w for t in TIMES for w in t.split()}
    words |= set("""the a an some many those these this that my your her his our is to on of in
    will did can should where when why how you they we please could would there was were
    and are it but so then before she after he while""".split())
    return words
