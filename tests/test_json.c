/* test_json.c - fg_json_loadb reads what Python's json module writes (core/fg_json.h). */
#include <math.h>
#include <string.h>

#include "fg_json.h"
#include "testutil.h"

static json_t *load(const char *text)
{
    json_error_t je;
    json_t *r = fg_json_loadb(text, strlen(text), JSON_REJECT_DUPLICATES, &je);
    ck_assert_msg(r != NULL, "%s: %s (line %d, column %d)", text, je.text, je.line, je.column);
    return r;
}

START_TEST(big_integer_is_a_real_of_its_value)
{
    /* transformers' tokenizer_config.json for a tokenizer with no maximum (int(1e30)) */
    json_t *r = load("{\"model_max_length\": 1000000000000000019884624838656, \"x\": 7}");
    json_t *m = json_object_get(r, "model_max_length");
    ck_assert(json_is_real(m));
    ck_assert(fabs(json_real_value(m) / 1e30 - 1) < 1e-14);
    ck_assert_int_eq(json_integer_value(json_object_get(r, "x")), 7);
    json_decref(r);
    /* int64's ends stay integers; one past them becomes real; negatives too */
    r = load("[9223372036854775807, -9223372036854775808, 9223372036854775808, "
             "-9223372036854775809, 12345678901234567890123]");
    ck_assert(json_is_integer(json_array_get(r, 0)));
    ck_assert(json_integer_value(json_array_get(r, 0)) == INT64_MAX);
    ck_assert(json_is_integer(json_array_get(r, 1)));
    ck_assert(json_is_real(json_array_get(r, 2)));
    ck_assert(json_real_value(json_array_get(r, 3)) < -9.2e18);
    ck_assert(fabs(json_real_value(json_array_get(r, 4)) / 1.2345678901234567e22 - 1) < 1e-14);
    json_decref(r);
}
END_TEST

START_TEST(integer_past_double_range_is_a_string)
{
    char text[512] = "[1";
    for (int i = 0; i < 350; i++)
        strcat(text, "0");
    strcat(text, "]");
    json_t *r = load(text);
    ck_assert(json_is_string(json_array_get(r, 0)));
    ck_assert_uint_eq(strlen(json_string_value(json_array_get(r, 0))), 351);
    json_decref(r);
}
END_TEST

START_TEST(nonfinite_words_become_strings)
{
    json_t *r = load("{\"a\": NaN, \"b\": Infinity, \"c\": -Infinity, \"d\": [NaN], \"e\": 1e-05}");
    ck_assert_str_eq(json_string_value(json_object_get(r, "a")), "NaN");
    ck_assert_str_eq(json_string_value(json_object_get(r, "b")), "Infinity");
    ck_assert_str_eq(json_string_value(json_object_get(r, "c")), "-Infinity");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(r, "d"), 0)), "NaN");
    ck_assert(fabs(json_real_value(json_object_get(r, "e")) - 1e-05) < 1e-20);
    json_decref(r);
}
END_TEST

START_TEST(strings_are_untouched)
{
    json_t *r = load("{\"s\": \"NaN 99999999999999999999999 \\\" Infinity\", \"n\": null}");
    ck_assert_str_eq(json_string_value(json_object_get(r, "s")),
                     "NaN 99999999999999999999999 \" Infinity");
    ck_assert(json_is_null(json_object_get(r, "n")));
    json_decref(r);
}
END_TEST

START_TEST(errors_still_point_at_the_input)
{
    /* a big integer before the fault keeps its length, so the column is the input's */
    const char *text = "{\"m\": 99999999999999999999999, \"x\": nul}";
    json_error_t je;
    ck_assert_ptr_null(fg_json_loadb(text, strlen(text), 0, &je));
    ck_assert_int_eq(je.line, 1);
    ck_assert_int_eq(je.column, (int)(strstr(text, "nul}") - text) + 3);
    /* words that only start like NaN / Infinity are not rewritten, and jansson refuses them */
    ck_assert_ptr_null(fg_json_loadb("[NaNa]", 6, 0, &je));
    ck_assert_ptr_null(fg_json_loadb("[Infinityx]", 11, 0, &je));
    ck_assert_ptr_null(fg_json_loadb("{\"a\":1,\"a\":2}", 13, JSON_REJECT_DUPLICATES, &je));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("python_dialect");
    tcase_add_test(tc, big_integer_is_a_real_of_its_value);
    tcase_add_test(tc, integer_past_double_range_is_a_string);
    tcase_add_test(tc, nonfinite_words_become_strings);
    tcase_add_test(tc, strings_are_untouched);
    tcase_add_test(tc, errors_still_point_at_the_input);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
