from calc.expr import evaluate, tokenize
