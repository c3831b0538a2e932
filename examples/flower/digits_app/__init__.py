"""A Flower app on scikit-learn's 8x8 digits whose server combines updates with a mianalysis rule."""
