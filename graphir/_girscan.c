/* graphir._girscan: the `.gir` reader's plain-line loop for the commonest node lines, compiled.
 *
 * The parser (graphir/parser.py, _Parser._read_plain_lines) reads canonical node lines with
 * regular expressions and builds each node as it goes. This module does the same for a subset of
 * those lines, with no regular expression and no Python-level call per node:
 *
 *     <spaces>%name = dialect.Op(%a, %b) : (T, T) -> T [cost = <decimal><unit>, mem = {...}]
 *
 * one result, no `@name`, no params, ASCII only, every operand already defined
 * with the type the line declares, and annotations of `cost` (a plain decimal of at most 28
 * characters) and/or `mem` only. The first line outside that subset ends the call unread, and the
 * Python loop reads it (and reports whatever is wrong with it), then calls here again. So for every
 * line this module accepts it must do exactly what the Python loop does: the same checks in the
 * same order, the same objects with the same fields, the same calls of the type reader on a cache
 * miss; tests/unit/test_girscan.py parses texts both ways and compares the results field by field.
 *
 * Objects are built as the Python loop builds them (object.__new__ and a store per slot, no
 * __init__): the slots' offsets are read from the classes' member descriptors when the reader is
 * made (make_reader), which refuses (returns None, and the Python loop does everything) unless
 * every class has exactly the slots this file sets.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

/* Slots of graphir.ir.Node, graphir.ir.Value, graphir.annotations.Cost and Mem, in this order. */
static const char *NODE_SLOTS[] = {"op", "name", "inputs", "outputs", "params", "_annotations", "graph",
                                   "_seq", "_index_pos", "_loc", "_line", "control_inputs", "control_users"};
enum { N_OP, N_NAME, N_INPUTS, N_OUTPUTS, N_PARAMS, N_ANNOTATIONS, N_GRAPH, N_SEQ, N_INDEX_POS, N_LOC, N_LINE,
       N_CONTROL_INPUTS, N_CONTROL_USERS, N_COUNT };
static const char *VALUE_SLOTS[] = {"name", "type", "kind", "producer", "output_index", "uses", "const", "graph"};
enum { V_NAME, V_TYPE, V_KIND, V_PRODUCER, V_OUTPUT_INDEX, V_USES, V_CONST, V_GRAPH, V_COUNT };
static const char *COST_SLOTS[] = {"times"};
static const char *MEM_SLOTS[] = {"persistent", "activation", "temporary"};
static const char *TYPE_SLOTS[] = {"dtype", "shape"};

#define MAX_OPERANDS 64 /* a line with more goes to the Python loop */

typedef struct {
    PyObject_HEAD
    /* The graph's tables and the parse's state (borrowed from the parser: it outlives the reader). */
    PyObject *values;      /* dict: value name -> Value (graph._values) */
    PyObject *node_names;  /* dict: node name -> Node (graph._node_names) */
    PyObject *nodes;       /* dict: Node -> None (graph._nodes) */
    PyObject *seq;         /* iterator: the graph's node sequence numbers (graph._seq) */
    PyObject *type_cache;  /* dict: type text -> TensorType */
    PyObject *make_type;   /* callable: type text -> TensorType or None (a cache miss) */
    PyObject *source;      /* the parse's SourceLines */
    PyObject *pending;     /* dict: value name -> uses waiting for it (_Body.pending) */
    PyObject *keys;        /* set: the annotation keys of the nodes added unchecked (_Body.keys) */
    PyObject *controls;    /* list: (node, control names, line) to connect at the end (_Body.controls) */
    PyObject *graph;
    PyObject *result_kind; /* ValueKind.RESULT */
    PyObject *no_nodes;    /* the shared empty control list (graphir.ir._NO_NODES) */
    PyObject *default_kind;
    PyObject *byte_units;  /* dict: unit -> int */
    PyObject *dtypes;      /* dict: dtype short name -> DType (graphir.fastline._DTYPES) */
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type, *tensor_type;
    Py_ssize_t node_off[N_COUNT], value_off[V_COUNT], cost_off[1], mem_off[3], type_off[2];
    PyObject *cost_key, *mem_key, *minus_one, *zero;
} Reader;

static void reader_dealloc(Reader *self) {
    Py_XDECREF(self->values);
    Py_XDECREF(self->node_names);
    Py_XDECREF(self->nodes);
    Py_XDECREF(self->seq);
    Py_XDECREF(self->type_cache);
    Py_XDECREF(self->make_type);
    Py_XDECREF(self->source);
    Py_XDECREF(self->pending);
    Py_XDECREF(self->keys);
    Py_XDECREF(self->controls);
    Py_XDECREF(self->graph);
    Py_XDECREF(self->result_kind);
    Py_XDECREF(self->no_nodes);
    Py_XDECREF(self->default_kind);
    Py_XDECREF(self->byte_units);
    Py_XDECREF(self->dtypes);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->node_type);
    Py_XDECREF(self->value_type);
    Py_XDECREF(self->cost_type);
    Py_XDECREF(self->mem_type);
    Py_XDECREF(self->cost_key);
    Py_XDECREF(self->mem_key);
    Py_XDECREF(self->minus_one);
    Py_XDECREF(self->zero);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Store a new reference into a fresh object's slot (its old value is NULL: the object is new). */
static inline void set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
    *(PyObject **)((char *)obj + offset) = value;
}

static inline PyObject *get_slot(PyObject *obj, Py_ssize_t offset) { return *(PyObject **)((char *)obj + offset); }

/* The offsets of `names`, the whole __slots__ of `type` apart from '__weakref__'; 0 on success,
 * 1 when the class is not as expected (no exception set), -1 on an error. */
static int slot_offsets(PyTypeObject *type, const char **names, int count, Py_ssize_t *offsets) {
    PyObject *slots = PyObject_GetAttrString((PyObject *)type, "__slots__");
    if (slots == NULL) return -1;
    PyObject *seq = PySequence_Fast(slots, "__slots__");
    Py_DECREF(slots);
    if (seq == NULL) return -1;
    int own = 0;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyUnicode_Check(item)) {
            Py_DECREF(seq);
            return 1;
        }
        if (PyUnicode_CompareWithASCIIString(item, "__weakref__") != 0) own++;
    }
    Py_DECREF(seq);
    if (own != count || type->tp_base != &PyBaseObject_Type) return 1;
    for (int k = 0; k < count; k++) {
        PyObject *descr = PyDict_GetItemString(type->tp_dict, names[k]); /* borrowed */
        if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) return 1;
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type != T_OBJECT_EX || (member->flags & READONLY)) return 1;
        offsets[k] = member->offset;
    }
    return 0;
}

/* make_reader(values, node_names, nodes, seq, type_cache, make_type, source, pending, keys, controls,
 *             graph, result_kind, no_nodes, default_kind, byte_units, dtypes, Node, Value, Cost, Mem,
 *             TensorType)
 * -> a reader, or None when a class's slots are not the ones this module sets. */
static PyTypeObject ReaderType;

static PyObject *make_reader(PyObject *module, PyObject *args) {
    PyObject *values, *node_names, *nodes, *seq, *type_cache, *make_type, *source, *pending, *keys, *controls, *graph;
    PyObject *result_kind, *no_nodes, *default_kind, *byte_units, *dtypes;
    PyTypeObject *node_type, *value_type, *cost_type, *mem_type, *tensor_type;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!OOO!O!O!OOO!UO!O!O!O!O!O!O!:make_reader", &PyDict_Type, &values, &PyDict_Type,
                          &node_names, &PyDict_Type, &nodes, &seq, &PyDict_Type, &type_cache, &make_type, &source,
                          &PyDict_Type, &pending, &PySet_Type, &keys, &PyList_Type, &controls, &graph, &result_kind, &PyTuple_Type, &no_nodes,
                          &default_kind, &PyDict_Type, &byte_units, &PyDict_Type, &dtypes, &PyType_Type,
                          &node_type, &PyType_Type, &value_type, &PyType_Type, &cost_type, &PyType_Type, &mem_type,
                          &PyType_Type, &tensor_type))
        return NULL;
    Reader *self = PyObject_New(Reader, &ReaderType);
    if (self == NULL) return NULL;
    PyObject **fields[] = {&self->values, &self->node_names, &self->nodes, &self->seq, &self->type_cache,
                           &self->make_type, &self->source, &self->pending, &self->keys, &self->controls,
                           &self->graph,
                           &self->result_kind, &self->no_nodes, &self->default_kind, &self->byte_units,
                           &self->dtypes, (PyObject **)&self->node_type, (PyObject **)&self->value_type,
                           (PyObject **)&self->cost_type, (PyObject **)&self->mem_type,
                           (PyObject **)&self->tensor_type,
                           &self->cost_key, &self->mem_key, &self->minus_one, &self->zero};
    PyObject *given[] = {values, node_names, nodes, seq, type_cache, make_type, source, pending, keys, controls, graph,
                         result_kind, no_nodes, default_kind, byte_units, dtypes, (PyObject *)node_type,
                         (PyObject *)value_type, (PyObject *)cost_type, (PyObject *)mem_type,
                         (PyObject *)tensor_type};
    size_t count = sizeof(fields) / sizeof(fields[0]);
    for (size_t k = 0; k < count; k++) *fields[k] = NULL;
    for (size_t k = 0; k < sizeof(given) / sizeof(given[0]); k++) {
        Py_INCREF(given[k]);
        *fields[k] = given[k];
    }
    self->cost_key = PyUnicode_InternFromString("cost");
    self->mem_key = PyUnicode_InternFromString("mem");
    self->minus_one = PyLong_FromLong(-1);
    self->zero = PyLong_FromLong(0);
    if (!self->cost_key || !self->mem_key || !self->minus_one || !self->zero) goto fail;
    int status = slot_offsets(node_type, NODE_SLOTS, N_COUNT, self->node_off);
    if (status == 0) status = slot_offsets(value_type, VALUE_SLOTS, V_COUNT, self->value_off);
    if (status == 0) status = slot_offsets(cost_type, COST_SLOTS, 1, self->cost_off);
    if (status == 0) status = slot_offsets(mem_type, MEM_SLOTS, 3, self->mem_off);
    if (status == 0) status = slot_offsets(tensor_type, TYPE_SLOTS, 2, self->type_off);
    if (status < 0) goto fail;
    if (status > 0) {
        Py_DECREF(self);
        Py_RETURN_NONE;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* ------------------------------------------------------------------ the line grammar */

static inline int is_name_char(char c) { /* graphir.lexer.NAME_CHARS: [A-Za-z0-9_.$#/-] */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '$' || c == '#' || c == '/' || c == '-';
}
static inline int is_word_char(char c) { /* [A-Za-z0-9_] */
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static inline int starts(const char *s, Py_ssize_t p, Py_ssize_t end, const char *lit, Py_ssize_t len) {
    return end - p >= len && memcmp(s + p, lit, (size_t)len) == 0;
}

/* A `%name` at p (bare name characters only): its end, or -1. */
static inline Py_ssize_t scan_value_name(const char *s, Py_ssize_t p, Py_ssize_t end) {
    if (p >= end || s[p] != '%') return -1;
    Py_ssize_t q = p + 1;
    while (q < end && is_name_char(s[q])) q++;
    return q > p + 1 ? q : -1;
}

/* A type at p as the parser's TYPE pattern reads it ([a-z][a-z0-9]*\[[^\]]*\]), without spaces
 * inside the brackets (the Python loop splits type lists at ", ", so a spaced shape is not one of
 * its pieces): its end, or -1. */
static inline Py_ssize_t scan_type(const char *s, Py_ssize_t p, Py_ssize_t end) {
    if (p >= end || !(s[p] >= 'a' && s[p] <= 'z')) return -1;
    Py_ssize_t q = p + 1;
    while (q < end && ((s[q] >= 'a' && s[q] <= 'z') || is_digit(s[q]))) q++;
    if (q >= end || s[q] != '[') return -1;
    q++;
    while (q < end && s[q] != ']') {
        if (s[q] == ' ') return -1;
        q++;
    }
    return q < end ? q + 1 : -1;
}

/* A static type s[p:q] (dtype[d,d,...], ASCII digits, as graphir.parse_values._STATIC_TYPE reads
 * it) of a known dtype, built and cached under `piece` as LineScanner._type builds it; Py_None (a
 * new reference) for any other text (the type reader's), NULL on an error. */
static PyObject *static_type(Reader *self, PyObject *piece, const char *s, Py_ssize_t p, Py_ssize_t q) {
    Py_ssize_t open = p;
    while (s[open] != '[') open++; /* scan_type found one */
    Py_ssize_t dims = 0;
    Py_ssize_t k = open + 1;
    if (k < q - 1) {
        for (;;) { /* [0-9]+(,[0-9]+)* up to the closing bracket at q - 1 */
            Py_ssize_t digits = k;
            while (k < q - 1 && is_digit(s[k])) k++;
            if (k == digits) Py_RETURN_NONE;
            dims++;
            if (k == q - 1) break;
            if (s[k] != ',') Py_RETURN_NONE;
            k++;
        }
    }
    PyObject *short_name = PyUnicode_FromStringAndSize(s + p, open - p);
    if (short_name == NULL) return NULL;
    PyObject *dtype = PyDict_GetItemWithError(self->dtypes, short_name); /* borrowed */
    Py_DECREF(short_name);
    if (dtype == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *shape = PyTuple_New(dims);
    if (shape == NULL) return NULL;
    k = open + 1;
    for (Py_ssize_t d = 0; d < dims; d++) {
        Py_ssize_t start = k;
        while (is_digit(s[k])) k++;
        PyObject *digits = PyUnicode_FromStringAndSize(s + start, k - start);
        PyObject *size = digits ? PyLong_FromUnicodeObject(digits, 10) : NULL;
        Py_XDECREF(digits);
        if (size == NULL) {
            Py_DECREF(shape);
            return NULL;
        }
        PyTuple_SET_ITEM(shape, d, size);
        k++; /* the comma */
    }
    PyObject *made = self->tensor_type->tp_alloc(self->tensor_type, 0);
    if (made == NULL) {
        Py_DECREF(shape);
        return NULL;
    }
    Py_INCREF(dtype);
    set_slot(made, self->type_off[0], dtype);
    set_slot(made, self->type_off[1], shape);
    if (PyDict_SetItem(self->type_cache, piece, made) < 0) {
        Py_DECREF(made);
        return NULL;
    }
    return made;
}

/* The type of text s[p:q]: the cache's, else the type reader's (which caches it); a new
 * reference, Py_None (a new reference) when it is not a type, NULL on an error. */
static PyObject *type_of(Reader *self, PyObject *text_obj, Py_ssize_t p, Py_ssize_t q) {
    PyObject *piece = PyUnicode_Substring(text_obj, p, q);
    if (piece == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(self->type_cache, piece); /* borrowed */
    if (found != NULL) {
        Py_DECREF(piece);
        Py_INCREF(found);
        return found;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(piece);
        return NULL;
    }
    const char *s = (const char *)PyUnicode_DATA(text_obj);
    PyObject *made = static_type(self, piece, s, p, q);
    if (made != Py_None) { /* built (and cached), or an error */
        Py_DECREF(piece);
        return made;
    }
    Py_DECREF(made);
    made = PyObject_CallOneArg(self->make_type, piece);
    Py_DECREF(piece);
    if (made == NULL) return NULL;
    if (!PyObject_IsTrue(made)) { /* the Python loop's `cache_get(piece) or make_type(piece)`, then all() */
        Py_DECREF(made);
        Py_RETURN_NONE;
    }
    return made;
}

/* One parsed line: positions in the text. */
typedef struct {
    Py_ssize_t name, name_end, op, op_end;
    Py_ssize_t operand[MAX_OPERANDS], operand_end[MAX_OPERANDS], type[MAX_OPERANDS], type_end[MAX_OPERANDS];
    Py_ssize_t control[MAX_OPERANDS], control_end[MAX_OPERANDS];
    int operands, types, controls;
    Py_ssize_t output, output_end;
    int has_cost, has_mem;
    Py_ssize_t cost, cost_end;
    const char *cost_exp;
    Py_ssize_t field[3], field_end[3];
    PyObject *field_unit[3]; /* borrowed from byte_units */
} Line;

/* The shape of a line from p to end (its newline), read with no object made: 1 when it is one
 * this module builds, 0 when the Python loop must read it. */
static int scan_line(Reader *self, const char *s, Py_ssize_t p, Py_ssize_t end, Line *line) {
    line->cost = line->cost_end = 0;
    line->cost_exp = "e0";
    while (p < end && s[p] == ' ') p++;
    line->name = p + 1;
    p = scan_value_name(s, p, end);
    if (p < 0) return 0;
    line->name_end = p;
    if (!starts(s, p, end, " = ", 3)) return 0; /* a comma: several results */
    p += 3;
    line->op = p;
    if (p >= end || !((s[p] >= 'a' && s[p] <= 'z') || (s[p] >= 'A' && s[p] <= 'Z') || s[p] == '_')) return 0;
    int dotted = 0;
    p++;
    while (p < end && ((s[p] >= 'a' && s[p] <= 'z') || (s[p] >= 'A' && s[p] <= 'Z') || is_digit(s[p]) ||
                       s[p] == '_' || s[p] == '.' || s[p] == '$')) {
        dotted |= s[p] == '.';
        p++;
    }
    line->op_end = p;
    if (!dotted || p >= end || s[p] != '(') return 0; /* " @name", or not a node line */
    p++;
    line->operands = 0;
    if (p < end && s[p] != ')') {
        for (;;) {
            if (line->operands == MAX_OPERANDS) return 0;
            Py_ssize_t q = scan_value_name(s, p, end);
            if (q < 0) return 0;
            line->operand[line->operands] = p + 1;
            line->operand_end[line->operands++] = q;
            p = q;
            if (starts(s, p, end, ", ", 2)) {
                p += 2;
                continue;
            }
            break;
        }
    }
    if (p >= end || s[p] != ')') return 0;
    p++;
    line->controls = 0;
    if (starts(s, p, end, " ctrl(", 6)) { /* control inputs: @name, ... */
        p += 6;
        for (;;) {
            if (line->controls == MAX_OPERANDS || p >= end || s[p] != '@') return 0;
            Py_ssize_t q = p + 1;
            while (q < end && is_name_char(s[q])) q++;
            if (q == p + 1) return 0;
            line->control[line->controls] = p + 1;
            line->control_end[line->controls++] = q;
            p = q;
            if (starts(s, p, end, ", ", 2)) {
                p += 2;
                continue;
            }
            break;
        }
        if (p >= end || s[p] != ')') return 0;
        p++;
    }
    if (!starts(s, p, end, " : (", 4)) return 0; /* params, or not canonical */
    p += 4;
    line->types = 0;
    if (p < end && s[p] != ')') {
        for (;;) {
            if (line->types == MAX_OPERANDS) return 0;
            Py_ssize_t q = scan_type(s, p, end);
            if (q < 0) return 0;
            line->type[line->types] = p;
            line->type_end[line->types++] = q;
            p = q;
            if (starts(s, p, end, ", ", 2)) {
                p += 2;
                continue;
            }
            break;
        }
    }
    if (!starts(s, p, end, ") -> ", 5)) return 0;
    p += 5;
    line->output = p;
    p = scan_type(s, p, end); /* "(...)": several results or none */
    if (p < 0) return 0;
    line->output_end = p;
    line->has_cost = line->has_mem = 0;
    if (p == end) return 1;
    if (!starts(s, p, end, " [", 2)) return 0;
    p += 2;
    if (starts(s, p, end, "cost = ", 7)) {
        /* graphir.fastline's duration: a plain decimal (\d+(\.\d*)?) and a time unit, then no word
         * character; the Python loop reads it with seconds_from, which takes text of at most 28
         * characters without an exponent through float("<text>e<exponent>"). */
        p += 7;
        line->cost = p;
        while (p < end && is_digit(s[p])) p++;
        if (p == line->cost) return 0;
        if (p < end && s[p] == '.') {
            p++;
            while (p < end && is_digit(s[p])) p++;
        }
        line->cost_end = p;
        if (p - line->cost > 28 || p >= end) return 0;
        if (starts(s, p, end, "ns", 2)) {
            line->cost_exp = "e-9";
            p += 2;
        } else if (starts(s, p, end, "us", 2)) {
            line->cost_exp = "e-6";
            p += 2;
        } else if (starts(s, p, end, "ms", 2)) {
            line->cost_exp = "e-3";
            p += 2;
        } else if (s[p] == 's') {
            line->cost_exp = "e0";
            p += 1;
        } else {
            return 0;
        }
        if (p < end && is_word_char(s[p])) return 0;
        line->has_cost = 1;
        if (starts(s, p, end, "]", 1) && p + 1 == end) return 1;
        if (!starts(s, p, end, ", ", 2)) return 0;
        p += 2;
    }
    if (!starts(s, p, end, "mem = {", 7)) return 0;
    p += 7;
    static const char *fields[] = {"persistent = ", "activation = ", "temporary = "};
    static const Py_ssize_t lengths[] = {13, 13, 12};
    int any = 0;
    for (int f = 0; f < 3; f++) {
        line->field[f] = -1;
        if (any) {
            if (!starts(s, p, end, ", ", 2) || !starts(s, p + 2, end, fields[f], lengths[f])) continue;
            p += 2;
        } else if (!starts(s, p, end, fields[f], lengths[f])) {
            continue;
        }
        p += lengths[f];
        Py_ssize_t digits = p;
        while (p < end && is_digit(s[p])) p++;
        if (p == digits || p - digits > 18) return 0; /* 18 digits: within a C long long before the unit */
        line->field[f] = digits;
        line->field_end[f] = p;
        static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        static const Py_ssize_t unit_lengths[] = {1, 3, 3, 3, 3};
        int u = 0;
        while (u < 5 && !starts(s, p, end, units[u], unit_lengths[u])) u++;
        if (u == 5) return 0;
        p += unit_lengths[u];
        if (p < end && is_word_char(s[p])) return 0;
        line->field_unit[f] = PyDict_GetItemString(self->byte_units, units[u]);
        if (line->field_unit[f] == NULL) return 0;
        any = 1;
    }
    if (!any || !starts(s, p, end, "}]", 2) || p + 2 != end) return 0;
    line->has_mem = 1;
    return 1;
}

/* The annotations of a scanned line, as graphir.fastline's cost-and-mem reader makes them: a new
 * dict, Py_None when the Python loop must read the line, NULL on an error. */
static PyObject *annotations_of(Reader *self, PyObject *text_obj, const char *s, Line *line) {
    PyObject *annotations = PyDict_New();
    if (annotations == NULL) return NULL;
    if (line->has_cost) {
        char buffer[40];
        Py_ssize_t length = line->cost_end - line->cost;
        memcpy(buffer, s + line->cost, (size_t)length);
        strcpy(buffer + length, line->cost_exp);
        double seconds = PyOS_string_to_double(buffer, NULL, NULL);
        if (seconds == -1.0 && PyErr_Occurred()) goto fail;
        if (!(seconds >= 0.0 && seconds < Py_HUGE_VAL)) {
            Py_DECREF(annotations);
            Py_RETURN_NONE;
        }
        PyObject *number = PyFloat_FromDouble(seconds);
        PyObject *pair = number ? PyTuple_Pack(2, self->default_kind, number) : NULL;
        Py_XDECREF(number);
        PyObject *times = pair ? PyTuple_Pack(1, pair) : NULL;
        Py_XDECREF(pair);
        if (times == NULL) goto fail;
        PyObject *cost = self->cost_type->tp_alloc(self->cost_type, 0);
        if (cost == NULL) {
            Py_DECREF(times);
            goto fail;
        }
        set_slot(cost, self->cost_off[0], times);
        int failed = PyDict_SetItem(annotations, self->cost_key, cost);
        Py_DECREF(cost);
        if (failed) goto fail;
    }
    if (line->has_mem) {
        PyObject *mem = self->mem_type->tp_alloc(self->mem_type, 0);
        if (mem == NULL) goto fail;
        for (int f = 0; f < 3; f++) {
            PyObject *bytes;
            if (line->field[f] < 0) {
                bytes = self->zero;
                Py_INCREF(bytes);
            } else {
                char digits[24];
                Py_ssize_t length = line->field_end[f] - line->field[f];
                memcpy(digits, s + line->field[f], (size_t)length);
                digits[length] = 0;
                PyObject *count = PyLong_FromString(digits, NULL, 10);
                bytes = count ? PyNumber_Multiply(count, line->field_unit[f]) : NULL;
                Py_XDECREF(count);
                if (bytes == NULL) {
                    Py_DECREF(mem);
                    goto fail;
                }
            }
            set_slot(mem, self->mem_off[f], bytes);
        }
        int failed = PyDict_SetItem(annotations, self->mem_key, mem);
        Py_DECREF(mem);
        if (failed) goto fail;
    }
    return annotations;
fail:
    Py_DECREF(annotations);
    return NULL;
}

/* reader(text, pos, number) -> (pos, number): build the nodes of the lines from `pos` (the start
 * of line `number + 1`) while they are of the subset this module reads; the first other line is
 * left unread. */
static PyObject *reader_call(Reader *self, PyObject *args, PyObject *kwargs) {
    PyObject *text_obj;
    Py_ssize_t pos, number;
    if (!PyArg_ParseTuple(args, "Unn:reader", &text_obj, &pos, &number)) return NULL;
    Py_ssize_t size = PyUnicode_GET_LENGTH(text_obj);
    if (!PyUnicode_IS_ASCII(text_obj)) return Py_BuildValue("nn", pos, number);
    const char *s = (const char *)PyUnicode_DATA(text_obj);
    PyObject *types[MAX_OPERANDS];
    PyObject *operand_values[MAX_OPERANDS]; /* borrowed */
    Line line;
    int seen_cost = 0, seen_mem = 0;
    PyObject *result = NULL;
    while (pos <= size) {
        const char *newline = memchr(s + pos, '\n', (size_t)(size - pos));
        Py_ssize_t eol = newline ? newline - s : size;
        if (!scan_line(self, s, pos, eol, &line)) break;
        /* The Python loop's order: annotations, the result's type, the result's name, then the
         * operands' names and types, then the node's name; a line it would stop at is left here. */
        PyObject *annotations = annotations_of(self, text_obj, s, &line);
        if (annotations == NULL) goto done;
        if (annotations == Py_None) {
            Py_DECREF(annotations);
            break;
        }
        PyObject *result_type = type_of(self, text_obj, line.output, line.output_end);
        if (result_type == NULL || result_type == Py_None) {
            Py_DECREF(annotations);
            Py_XDECREF(result_type);
            if (result_type == NULL) goto done;
            break;
        }
        PyObject *name = PyUnicode_Substring(text_obj, line.name, line.name_end);
        if (name == NULL) {
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            goto done;
        }
        int stop = 0;
        int known = PyDict_Contains(self->values, name);
        if (known != 0) stop = known < 0 ? -1 : 1;
        /* Operands without types or types without operands: stopped before any type is read;
         * otherwise every piece is read (a miss calls the type reader) before the checks. */
        int ntypes = 0;
        if (!stop && (line.operands == 0) != (line.types == 0)) stop = 1;
        if (!stop) {
            int missing = 0;
            for (int k = 0; k < line.types; k++) {
                types[k] = type_of(self, text_obj, line.type[k], line.type_end[k]);
                if (types[k] == NULL) {
                    stop = -1;
                    break;
                }
                ntypes++;
                missing |= types[k] == Py_None;
            }
            if (!stop && (missing || line.types != line.operands)) stop = 1;
        }
        /* Beyond the Python loop's checks: every operand defined with the declared type (else its
         * pending and mismatch bookkeeping), and no earlier line waiting for this result. */
        for (int k = 0; !stop && k < line.operands; k++) {
            PyObject *value_name = PyUnicode_Substring(text_obj, line.operand[k], line.operand_end[k]);
            if (value_name == NULL) {
                stop = -1;
                break;
            }
            PyObject *value = PyDict_GetItemWithError(self->values, value_name); /* borrowed */
            Py_DECREF(value_name);
            if (value == NULL) {
                stop = PyErr_Occurred() ? -1 : 1;
                break;
            }
            if (!PyObject_TypeCheck(value, self->value_type)) {
                stop = 1;
                break;
            }
            PyObject *value_type = get_slot(value, self->value_off[V_TYPE]);
            if (value_type != types[k]) {
                int differs = PyObject_RichCompareBool(value_type, types[k], Py_NE);
                if (differs) {
                    stop = differs < 0 ? -1 : 1;
                    break;
                }
            }
            operand_values[k] = value;
        }
        if (!stop) {
            known = PyDict_Contains(self->node_names, name);
            if (known != 0) stop = known < 0 ? -1 : 1;
        }
        if (!stop && PyDict_GET_SIZE(self->pending)) {
            known = PyDict_Contains(self->pending, name);
            if (known != 0) stop = known < 0 ? -1 : 1;
        }
        if (stop) {
            for (int k = 0; k < ntypes; k++) Py_DECREF(types[k]);
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            Py_DECREF(name);
            if (stop < 0) goto done;
            break;
        }
        /* Build what Graph.add_node_unchecked and _Body.connect build. */
        PyObject *op = PyUnicode_Substring(text_obj, line.op, line.op_end);
        PyObject *seq = op ? PyIter_Next(self->seq) : NULL;
        PyObject *line_number = seq ? PyLong_FromSsize_t(number + 1) : NULL;
        PyObject *inputs = line_number ? PyList_New(line.operands) : NULL;
        PyObject *outputs = inputs ? PyList_New(1) : NULL;
        PyObject *params = outputs ? PyDict_New() : NULL;
        PyObject *uses = params ? PyList_New(0) : NULL;
        PyObject *node = uses ? self->node_type->tp_alloc(self->node_type, 0) : NULL;
        PyObject *value = node ? self->value_type->tp_alloc(self->value_type, 0) : NULL;
        for (int k = 0; k < ntypes; k++) Py_DECREF(types[k]);
        if (value == NULL) {
            if (seq == NULL && op != NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "node numbers ran out");
            Py_XDECREF(op);
            Py_XDECREF(seq);
            Py_XDECREF(line_number);
            Py_XDECREF(inputs);
            Py_XDECREF(outputs);
            Py_XDECREF(params);
            Py_XDECREF(uses);
            Py_XDECREF(node);
            Py_DECREF(annotations);
            Py_DECREF(result_type);
            Py_DECREF(name);
            goto done;
        }
        PyUnicode_InternInPlace(&op);
        number++;
        const Py_ssize_t *n_off = self->node_off, *v_off = self->value_off;
        set_slot(node, n_off[N_OP], op);
        Py_INCREF(name);
        set_slot(node, n_off[N_NAME], name);
        set_slot(node, n_off[N_INPUTS], inputs);
        set_slot(node, n_off[N_OUTPUTS], outputs);
        set_slot(node, n_off[N_PARAMS], params);
        set_slot(node, n_off[N_ANNOTATIONS], annotations);
        Py_INCREF(self->graph);
        set_slot(node, n_off[N_GRAPH], self->graph);
        set_slot(node, n_off[N_SEQ], seq);
        Py_INCREF(self->minus_one);
        set_slot(node, n_off[N_INDEX_POS], self->minus_one);
        Py_INCREF(self->source);
        set_slot(node, n_off[N_LOC], self->source);
        set_slot(node, n_off[N_LINE], line_number);
        Py_INCREF(self->no_nodes);
        set_slot(node, n_off[N_CONTROL_INPUTS], self->no_nodes);
        Py_INCREF(self->no_nodes);
        set_slot(node, n_off[N_CONTROL_USERS], self->no_nodes);
        set_slot(value, v_off[V_NAME], name); /* the reference made by the substring */
        set_slot(value, v_off[V_TYPE], result_type);
        Py_INCREF(self->result_kind);
        set_slot(value, v_off[V_KIND], self->result_kind);
        Py_INCREF(node);
        set_slot(value, v_off[V_PRODUCER], node);
        Py_INCREF(self->zero);
        set_slot(value, v_off[V_OUTPUT_INDEX], self->zero);
        set_slot(value, v_off[V_USES], uses);
        Py_INCREF(Py_None);
        set_slot(value, v_off[V_CONST], Py_None);
        Py_INCREF(self->graph);
        set_slot(value, v_off[V_GRAPH], self->graph);
        PyList_SET_ITEM(outputs, 0, value); /* the list owns the new reference */
        seen_cost |= line.has_cost;
        seen_mem |= line.has_mem;
        int failed = PyDict_SetItem(self->values, name, value) || PyDict_SetItem(self->nodes, node, Py_None) ||
                     PyDict_SetItem(self->node_names, name, node);
        for (int k = 0; !failed && k < line.operands; k++) {
            PyObject *operand = operand_values[k];
            Py_INCREF(operand);
            PyList_SET_ITEM(inputs, k, operand);
            PyObject *index = PyLong_FromLong(k);
            PyObject *use = index ? PyTuple_Pack(2, node, index) : NULL;
            Py_XDECREF(index);
            failed = use == NULL || PyList_Append(get_slot(operand, v_off[V_USES]), use);
            Py_XDECREF(use);
        }
        if (!failed && line.controls) { /* connected at the end, as _Body.connect leaves them */
            PyObject *names = PyList_New(line.controls);
            for (int k = 0; names != NULL && k < line.controls; k++) {
                PyObject *control = PyUnicode_Substring(text_obj, line.control[k], line.control_end[k]);
                if (control == NULL) Py_CLEAR(names);
                else PyList_SET_ITEM(names, k, control);
            }
            PyObject *entry = names ? PyTuple_Pack(3, node, names, line_number) : NULL;
            Py_XDECREF(names);
            failed = entry == NULL || PyList_Append(self->controls, entry);
            Py_XDECREF(entry);
        }
        Py_DECREF(node);
        if (failed) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the compiled reader could not connect a node");
            goto done;
        }
        pos = eol + 1;
    }
    result = Py_BuildValue("nn", pos, number);
done:
    if ((seen_cost && PySet_Add(self->keys, self->cost_key)) || (seen_mem && PySet_Add(self->keys, self->mem_key))) {
        Py_CLEAR(result);
    }
    return result;
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "graphir._girscan.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_call = (ternaryfunc)reader_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "reader(text, pos, number) -> (pos, number): the compiled plain-line loop of one graph body.",
};

static PyMethodDef methods[] = {
    {"make_reader", make_reader, METH_VARARGS,
     "make_reader(values, node_names, nodes, seq, type_cache, make_type, source, pending, keys, controls, graph, "
     "result_kind, no_nodes, default_kind, byte_units, dtypes, Node, Value, Cost, Mem, TensorType) -> a reader, "
     "or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "graphir._girscan",
    "The .gir reader's plain-line loop for the commonest node lines, compiled (see graphir/_girscan.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__girscan(void) {
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    return PyModule_Create(&module);
}
