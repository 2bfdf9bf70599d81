"""The typed, frozen form of a checked loader config (LoaderConfig and its parts), its bounds and the
dtype values it fills tensors with: the vocabulary every other layer speaks. Imports nothing of the
package but the errors."""
