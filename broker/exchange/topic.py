# Owns: the topic exchange's trie of binding-key words and its bounded routing-key cache.
# Talked to by: the vhost (bindings) and broker/exchange/router.py (route, per publish).
# Must never: do I/O, await, compile a regex per binding, or serve a cached result after a
# binding change (every change clears the cache).
"""Topic exchange: binding keys are dot-separated words where `*` matches exactly one word
and `#` matches zero or more words.

Words are split on "." exactly as RabbitMQ does (rabbit_exchange_type_topic.erl,
`split_topic_key`): the empty key "" has zero words, every other key has one more word than
it has dots, so empty words count ("a..b" is three words, "a." two). Verified against
RabbitMQ 3.10: routing key "" is matched by "#", "#.#" and "" but not by "*" or "*.#";
"." is matched by "*.*"; "a..b" by "a.*.b" and "a.#.b".

The trie holds one node per binding-key prefix; matching walks it once per routing key,
visiting each (node, word position) pair at most once, so "#.#.#" cannot blow up.
Source: https://www.rabbitmq.com/tutorials/amqp-concepts.html#exchange-topic,
https://www.rabbitmq.com/tutorials/tutorial-five-python.html.
"""

from __future__ import annotations

from collections.abc import Hashable

from broker.exchange.base import BindingTable, count_down, count_up

CACHE_SIZE = 4096  # routing keys remembered; oldest evicted first


def split_words(key: str) -> list[str]:
    """Words of a topic routing or binding key: [] for "", else `key.split(".")`."""
    return key.split(".") if key else []


class _Node:
    """One trie node: the binding-key prefix that leads here."""

    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}  # next word ("*", "#" or literal) -> node
        self.dests: dict[Hashable, int] = {}  # destinations whose binding key ends here


class TopicRouting(BindingTable):
    """Routing table of a topic exchange.

    `route(routing_key, headers)` returns a frozenset of destinations (headers ignored),
    served from a cache of up to `cache_size` routing keys that any binding change clears.
    """

    __slots__ = ("_root", "_cache", "_cache_size")

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        super().__init__()
        # the empty binding-key prefix; its `dests` are bindings with key "".
        self._root = _Node()
        # routing_key -> frozenset of destinations, insertion-ordered for eviction.
        self._cache: dict[str, frozenset] = {}
        # bound on `_cache`; 0 disables caching.
        self._cache_size = cache_size

    def route(self, routing_key: str, headers: dict | None = None,
              message: object = None) -> frozenset:
        """Destinations whose binding key matches `routing_key`, each once."""
        hit = self._cache.get(routing_key)
        if hit is not None:
            return hit
        result = frozenset(self._match(split_words(routing_key)))
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                del self._cache[next(iter(self._cache))]
            self._cache[routing_key] = result
        return result

    def _match(self, words: list[str]) -> set[Hashable]:
        out: set[Hashable] = set()
        n = len(words)
        seen: set[tuple[_Node, int]] = set()
        stack = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            children = node.children
            hash_node = children.get("#")
            if hash_node is not None:  # "#" eats words i..j-1 for every j in i..n
                for j in range(i, n + 1):
                    if (hash_node, j) not in seen:
                        seen.add((hash_node, j))
                        stack.append((hash_node, j))
            if i == n:
                out.update(node.dests)
                continue
            for child in (children.get(words[i]), children.get("*")):
                if child is not None and (child, i + 1) not in seen:
                    seen.add((child, i + 1))
                    stack.append((child, i + 1))
        return out

    def _index_add(
        self, destination: Hashable, routing_key: str, frozen: Hashable, arguments: dict
    ) -> None:
        node = self._root
        for word in split_words(routing_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        count_up(node.dests, destination)
        self._cache.clear()

    def _index_remove(self, destination: Hashable, routing_key: str, frozen: Hashable) -> None:
        path = [self._root]
        words = split_words(routing_key)
        for word in words:
            path.append(path[-1].children[word])
        count_down(path[-1].dests, destination)
        for depth in range(len(words), 0, -1):  # prune nodes left with nothing
            node = path[depth]
            if node.dests or node.children:
                break
            del path[depth - 1].children[words[depth - 1]]
        self._cache.clear()

    def node_count(self) -> int:
        """Trie nodes below the root (tests check that removal prunes)."""
        stack, n = [self._root], 0
        while stack:
            node = stack.pop()
            n += len(node.children)
            stack.extend(node.children.values())
        return n
