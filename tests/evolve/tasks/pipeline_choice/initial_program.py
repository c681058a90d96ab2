"""Choose one option for each of four stages of a data pipeline."""

# EVOLVE-BLOCK-START


def choose_stages():
    """The four stage choices; the evaluator only says how many are right, not which."""
    # reader options: ['csv_reader', 'json_reader', 'xml_reader', 'parquet_reader', 'sql_reader']
    # scaler options: ['normalize', 'standardize', 'minmax', 'robust', 'none']
    # solver options: ['lbfgs', 'adam', 'sgd', 'newton', 'bisection']
    # writer options: ['json', 'xml', 'csv', 'yaml', 'protobuf']
    return {
        "reader": "json_reader",
        "scaler": "standardize",
        "solver": "adam",
        "writer": "xml",
    }


# EVOLVE-BLOCK-END


def run():
    return choose_stages()
