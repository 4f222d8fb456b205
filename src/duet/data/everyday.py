"""The everyday register: greetings, requests, questions and small talk, the sentences a newcomer types first.

The books, WordNet and fortunes give a corpus its breadth, but hardly any of them greet anyone: the `joe` pool of
11,000 book sentences holds not one "hello". A tiny model then has to guess how a greeting sounds. This module
generates conversational sentences from a small grammar (openers, names, follow-ups, request and question frames),
deterministic for a seed, so a corpus preset can give each voice a quota of them (``SpeakerQuota.everyday``).

``PROBES`` are the sentences ``benchmarks/everyday_bench.py`` asks models to say; the generator never emits one of
them, so the benchmark stays a test of what a model learned, not of what it heard.
"""

from __future__ import annotations

import random

PROBES = (
    "Hello there.",
    "Good morning, how are you today?",
    "Please turn off the lights when you leave the room.",
    "The weather is nice, so we are going for a walk.",
    "Can you tell me where the train station is?",
    "Thank you very much for your help.",
)

_NAMES = ("Anna", "Ben", "Clara", "David", "Emma", "Frank", "Grace", "Henry", "Julia", "Kevin", "Laura", "Mark",
          "Nina", "Oscar", "Paul", "Rachel", "Sam", "Tom", "Victor", "Zoe", "Mr. Brown", "Mrs. Green", "Dr. Lee")
_GREETINGS = ("Hello", "Hello there", "Hi", "Hi there", "Hey", "Good morning", "Good afternoon", "Good evening",
              "Welcome", "Hello again", "Morning", "Hey there")
_FOLLOW_UPS = ("how are you?", "how are you doing?", "nice to see you.", "how was your day?", "welcome back.",
               "it's good to hear from you.", "thanks for coming.", "come on in.", "how have you been?",
               "long time no see.", "did you sleep well?", "are you ready to go?", "what can I do for you?",
               "I hope you are well.", "it's been a while.", "great to meet you.")
_VERBS = ("open", "close", "bring", "check", "clean", "fix", "find", "move", "carry", "wash", "lock", "pass")
_THINGS = ("door", "window", "car", "kitchen", "phone", "letter", "table", "bag", "garden", "computer", "box",
           "keys", "map", "bottle", "book", "lights", "music", "oven")
_PLACES = ("train station", "bus stop", "post office", "library", "hospital", "bank", "museum", "airport",
           "pharmacy", "hotel", "market", "park", "restaurant", "police station", "school", "supermarket")
_TIMES = ("tomorrow", "tonight", "later", "next week", "this afternoon", "in an hour", "on Monday", "soon",
          "after lunch", "in the morning", "this evening", "on Friday")
_WEATHER = ("nice", "cold", "warm", "sunny", "windy", "raining", "lovely", "hot", "cloudy", "cool")
_ACTIVITIES = ("go for a walk", "stay inside", "have lunch outside", "go to the beach", "take the bus",
               "play in the park", "visit the market", "ride our bikes", "make some tea", "read at home")
_THANKS = ("your help", "coming", "the lovely dinner", "calling me", "waiting", "your time", "the advice",
           "the flowers", "everything", "listening", "the ride", "your patience")
_SHORT = ("Yes, of course.", "No problem.", "Excuse me, please.", "I'm sorry, I didn't hear you.",
          "Could you say that again?", "Just a moment, please.", "That sounds great.", "I don't think so.",
          "Let me think about it.", "See you soon.", "Have a nice day.", "Take care of yourself.",
          "I'm on my way.", "Sorry, I'm late.", "Nice to meet you.", "What do you mean?", "I'll be right back.",
          "Happy to help.", "Sounds good to me.", "Good night, sleep well.")


def _sentence(rng: random.Random) -> str:
    c = rng.choice
    frames = (
        lambda: f"{c(_GREETINGS)}.",
        lambda: f"{c(_GREETINGS)}, {c(_NAMES)}.",
        lambda: f"{c(_GREETINGS)}, {c(_FOLLOW_UPS)}",
        lambda: f"{c(_GREETINGS)}, {c(_NAMES)}, {c(_FOLLOW_UPS)}",
        lambda: f"{c(_GREETINGS)}! My name is {c(_NAMES)}.",
        lambda: f"Could you please {c(_VERBS)} the {c(_THINGS)}?",
        lambda: f"Please {c(_VERBS)} the {c(_THINGS)} before you go.",
        lambda: f"Can you {c(_VERBS)} the {c(_THINGS)} for me, {c(_NAMES)}?",
        lambda: f"Where is the {c(_PLACES)}?",
        lambda: f"Can you tell me how to get to the {c(_PLACES)}?",
        lambda: f"What time does the {c(_PLACES)} open?",
        lambda: f"Is the {c(_PLACES)} far from here?",
        lambda: f"Do you know where {c(_NAMES)} is?",
        lambda: f"I will call you back {c(_TIMES)}.",
        lambda: f"See you {c(_TIMES)}, {c(_NAMES)}.",
        lambda: f"Let's meet at the {c(_PLACES)} {c(_TIMES)}.",
        lambda: f"Thank you for {c(_THANKS)}.",
        lambda: f"Thanks a lot for {c(_THANKS)}, {c(_NAMES)}.",
        lambda: f"It's {c(_WEATHER)} today, so let's {c(_ACTIVITIES)}.",
        lambda: f"The weather is {c(_WEATHER)}, so we could {c(_ACTIVITIES)}.",
        lambda: c(_SHORT),
    )
    return c(frames)()


def everyday_sentences(n: int, seed: int = 0) -> list[str]:
    """Up to ``n`` distinct everyday sentences (never one of ``PROBES``), in a seeded order: the first k of a
    larger n are the same k sentences, so a quota can grow without replanning what was already rendered."""
    rng = random.Random(f"everyday:{seed}")
    held_out = set(PROBES)
    out: dict[str, None] = {}
    for _ in range(50 * n):
        if len(out) >= n:
            break
        text = _sentence(rng)
        if text not in held_out:
            out.setdefault(text, None)
    return list(out)
